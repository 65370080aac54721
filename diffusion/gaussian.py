"""Pure functions of arrays shared by the diffusion processes: Gaussian KL, the discretised decoder, the learned-range
log-variance, folding many timesteps into one batch, and the stratified timesteps of the bound estimate. The processes
(ddpm.py) use them.

Formulas follow openai/improved-diffusion (`gaussian_diffusion.py`, `losses.py`); docs/method.md#the-variational-bound.
Choice written down: the discretised Gaussian decoder uses the tanh approximation of the normal CDF, as
improved-diffusion does, so the numbers match that reference; bins are 2/255 wide, edge bins open-ended,
probabilities clamped at 1e-12.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

LN2 = math.log(2.0)


def extract(table: jnp.ndarray, t: jnp.ndarray, ndim: int) -> jnp.ndarray:
    """table[t] reshaped to [B, 1, ..., 1] for broadcasting against a rank-`ndim` batch."""
    return table[t].reshape(t.shape + (1,) * (ndim - t.ndim))


def mean_flat(x: jnp.ndarray) -> jnp.ndarray:
    return jnp.mean(x, axis=tuple(range(1, x.ndim)))


def normal_kl(mean1, logvar1, mean2, logvar2):
    """KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)), elementwise, in nats."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + jnp.exp(logvar1 - logvar2) + (mean1 - mean2) ** 2 * jnp.exp(-logvar2))


def learned_range_log_variance(v, min_log, max_log):
    """improved-diffusion's LEARNED_RANGE log-variance: the network's raw v (nominally in [-1, 1], not clipped)
    interpolates log-linearly, frac * max_log + (1 - frac) * min_log with frac = (v + 1) / 2; min_log = log beta~_t
    (clipped), max_log = log beta_t. v = -1 gives min_log and v = +1 max_log exactly."""
    frac = (v + 1) / 2
    return frac * max_log + (1 - frac) * min_log


def approx_standard_normal_cdf(x):
    return 0.5 * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def discretized_gaussian_log_likelihood(x, means, log_scales):
    """log p(x) for x in [-1, 1] quantised to 256 levels, elementwise, in nats."""
    centered = x - means
    inv_stdv = jnp.exp(-log_scales)
    cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + 1.0 / 255.0))
    cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - 1.0 / 255.0))
    log_cdf_plus = jnp.log(jnp.maximum(cdf_plus, 1e-12))
    log_one_minus_cdf_min = jnp.log(jnp.maximum(1.0 - cdf_min, 1e-12))
    log_delta = jnp.log(jnp.maximum(cdf_plus - cdf_min, 1e-12))
    return jnp.where(x < -0.999, log_cdf_plus, jnp.where(x > 0.999, log_one_minus_cdf_min, log_delta))


def fold_timesteps(row_terms, x0, ts, noise, max_rows: int = 0):
    """Per-row terms for many timesteps at once: x0 [B, H, W, C], ts [K], noise [K, B, H, W, C] -> [B, K].

    `row_terms(x0r, tr, nr) -> [N]` computes one term per row of a flat batch of N = B * k (image, timestep, noise)
    rows. The K copies are folded batch-major (example b's k rows are adjacent), so the new rows stay on the device
    that holds example b when the batch is sharded (style.md pitfalls: vmap over K added an all-gather).
    With max_rows > 0 the timesteps are processed in sequential chunks (lax.map) of at most max(1, max_rows // B)
    timesteps, which bounds peak memory: XLA sizes its scratch memory for the largest branch of the step even on
    steps that do not run it.
    """
    B, K = x0.shape[0], ts.shape[0]

    def chunk(ts_c, noise_c):
        k = ts_c.shape[0]
        x0r = jnp.repeat(x0, k, axis=0)  # [B*k, ...], row b*k + j
        tr = jnp.tile(ts_c, B)
        nr = jnp.swapaxes(noise_c, 0, 1).reshape((B * k,) + x0.shape[1:])
        return row_terms(x0r, tr, nr).reshape(B, k)

    k = K if max_rows <= 0 else max(1, min(K, max_rows // B))
    if k >= K:
        return chunk(ts, noise)
    n = -(-K // k)
    pad = n * k - K
    ts_p = jnp.concatenate([ts, jnp.broadcast_to(ts[:1], (pad,))]).reshape(n, k)
    noise_p = jnp.concatenate([noise, jnp.broadcast_to(noise[:1], (pad,) + noise.shape[1:])])
    noise_p = noise_p.reshape((n, k) + noise.shape[1:])
    out = jax.lax.map(lambda a: chunk(*a), (ts_p, noise_p))  # [n, B, k]
    return jnp.moveaxis(out, 0, 1).reshape(B, n * k)[:, :K]


def stratum_edges(num_timesteps: int, num_strata: int) -> np.ndarray:
    """Edges e_0 = 1 < e_1 < ... < e_M = T of M = num_strata contiguous strata [e_{k-1}, e_k) of 1..T-1, spaced
    geometrically (e_k ~ T^(k/M)) with at least one timestep each: fine where L_t changes fast (small t, where most
    of the bound is), coarse where it is flat."""
    T, M = num_timesteps, num_strata
    edges = [1]
    for k in range(1, M + 1):
        target = int(round(math.exp(math.log(T) * k / M)))
        edges.append(min(max(edges[-1] + 1, target), T - (M - k)))
    return np.asarray(edges)


def stratified_timesteps(num_timesteps: int, num_t: int, key):
    """(ts [num_t], weights [num_t]) of the stratified bound estimate: t = 0 always (weight 1; L_0 is large and
    unlike its neighbours), then one uniform t in each of the num_t - 1 strata of stratum_edges, weighted by its
    stratum's size. sum_k weights_k L_{ts_k} is unbiased for sum_t L_t."""
    edges = stratum_edges(num_timesteps, num_t - 1)
    starts = jnp.asarray(edges[:-1], jnp.int32)
    sizes = jnp.asarray(np.diff(edges), jnp.int32)
    offsets = jnp.floor(jax.random.uniform(key, (num_t - 1,)) * sizes).astype(jnp.int32)
    ts = jnp.concatenate([jnp.zeros((1,), jnp.int32), starts + jnp.minimum(offsets, sizes - 1)])
    return ts, jnp.concatenate([jnp.ones((1,), jnp.float32), sizes.astype(jnp.float32)])


def strata_timesteps(num_timesteps: int, num_strata: int, per_stratum: int, key):
    """(ts [K, m] int32, sizes [K] float32): m = per_stratum timesteps in each of the K = num_strata geometric strata
    of 1..T-1 (stratum_edges), drawn uniformly and independently (with replacement, so that their sample variance
    estimates the variance of one draw with no finite-population correction; in a stratum of one timestep they
    differ in their noise only), and each stratum's size n_k: sum_k n_k mean_j L_{ts[k, j]} is unbiased for
    sum_{t=1}^{T-1} L_t (ddpm.DDPM.nll_bpd_strata, which takes t = 0 apart)."""
    edges = stratum_edges(num_timesteps, num_strata)
    sizes = np.diff(edges)
    u = jax.random.uniform(key, (num_strata, per_stratum))
    offsets = jnp.minimum(jnp.floor(u * sizes[:, None]).astype(jnp.int32), jnp.asarray(sizes[:, None] - 1, jnp.int32))
    return jnp.asarray(edges[:-1, None], jnp.int32) + offsets, jnp.asarray(sizes, jnp.float32)
