"""Forward process, posterior, model mean/variance and the variational bound in bits/dim.

Formulas follow openai/improved-diffusion (`gaussian_diffusion.py`, `losses.py`); method.md section 4.
All functions take images in [-1, 1] with shape [B, H, W, C] and integer timesteps t of shape [B].

Choices written down:
- The discretised Gaussian decoder uses the tanh approximation of the normal CDF, as improved-diffusion does, so the
  numbers match that reference; bins are 2/255 wide, edge bins open-ended, probabilities clamped at 1e-12.
- `clip_denoised` clips the predicted x0 to [-1, 1] before forming the model mean. Training-time terms (the learned
  sampler's reward) use False, the evaluation NLL uses True, both as in improved-diffusion.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

from diffusion.schedules import Schedule

TARGETS = ("eps", "x0", "v")
VARIANCES = ("fixed_large", "fixed_small")
LN2 = math.log(2.0)


def extract(table: jnp.ndarray, t: jnp.ndarray, ndim: int) -> jnp.ndarray:
    """table[t] reshaped to [B, 1, ..., 1] for broadcasting against a rank-`ndim` batch."""
    return table[t].reshape(t.shape + (1,) * (ndim - t.ndim))


def mean_flat(x: jnp.ndarray) -> jnp.ndarray:
    return jnp.mean(x, axis=tuple(range(1, x.ndim)))


def q_sample(s: Schedule, x0, t, noise):
    """x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps."""
    return extract(s.sqrt_alphas_cumprod, t, x0.ndim) * x0 + extract(s.sqrt_one_minus_alphas_cumprod, t, x0.ndim) * noise


def q_mean_variance(s: Schedule, x0, t):
    """Mean, variance, log-variance of q(x_t | x0)."""
    mean = extract(s.sqrt_alphas_cumprod, t, x0.ndim) * x0
    var = extract(1.0 - s.alphas_cumprod, t, x0.ndim)
    return mean, var, jnp.log(var)


def q_posterior(s: Schedule, x0, xt, t):
    """Mean, variance and clipped log-variance of q(x_{t-1} | x_t, x0)."""
    mean = extract(s.posterior_mean_coef1, t, xt.ndim) * x0 + extract(s.posterior_mean_coef2, t, xt.ndim) * xt
    return mean, extract(s.posterior_variance, t, xt.ndim), extract(s.posterior_log_variance_clipped, t, xt.ndim)


def training_target(s: Schedule, target: str, x0, t, noise):
    """What the network regresses: eps, x0, or v = sqrt(ab) eps - sqrt(1 - ab) x0."""
    if target == "eps":
        return noise
    if target == "x0":
        return x0
    if target == "v":
        return extract(s.sqrt_alphas_cumprod, t, x0.ndim) * noise - extract(s.sqrt_one_minus_alphas_cumprod, t, x0.ndim) * x0
    raise ValueError(f"config.diffusion.target={target!r} is not one of {', '.join(TARGETS)}")


def predict_x0(s: Schedule, target: str, xt, t, out):
    if target == "eps":
        return extract(s.sqrt_recip_alphas_cumprod, t, xt.ndim) * xt - extract(s.sqrt_recipm1_alphas_cumprod, t, xt.ndim) * out
    if target == "x0":
        return out
    if target == "v":
        return extract(s.sqrt_alphas_cumprod, t, xt.ndim) * xt - extract(s.sqrt_one_minus_alphas_cumprod, t, xt.ndim) * out
    raise ValueError(f"config.diffusion.target={target!r} is not one of {', '.join(TARGETS)}")


def predict_eps(s: Schedule, xt, t, x0_hat):
    return (extract(s.sqrt_recip_alphas_cumprod, t, xt.ndim) * xt - x0_hat) / extract(s.sqrt_recipm1_alphas_cumprod, t, xt.ndim)


def model_log_variance(s: Schedule, variance: str, t, ndim: int):
    """Fixed-large: beta_t with beta~_1 at t = 0. Fixed-small: beta~_t, log clipped at t = 0."""
    if variance == "fixed_large":
        table = jnp.log(jnp.concatenate([s.posterior_variance[1:2], s.betas[1:]]))
    elif variance == "fixed_small":
        table = s.posterior_log_variance_clipped
    else:
        raise ValueError(f"config.diffusion.variance={variance!r} is not one of {', '.join(VARIANCES)}")
    return extract(table, t, ndim)


def p_mean_variance(s: Schedule, target: str, variance: str, xt, t, out, clip_denoised: bool):
    """Mean and log-variance of p_theta(x_{t-1} | x_t) given the network output `out`; also x0_hat."""
    x0_hat = predict_x0(s, target, xt, t, out)
    if clip_denoised:
        x0_hat = jnp.clip(x0_hat, -1.0, 1.0)
    mean, _, _ = q_posterior(s, x0_hat, xt, t)
    return mean, model_log_variance(s, variance, t, xt.ndim), x0_hat


def normal_kl(mean1, logvar1, mean2, logvar2):
    """KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)), elementwise, in nats."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + jnp.exp(logvar1 - logvar2) + (mean1 - mean2) ** 2 * jnp.exp(-logvar2))


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


def vb_terms_bpd(s: Schedule, target: str, variance: str, x0, xt, t, out, clip_denoised: bool = False):
    """Per-example bound term L_t in bits/dim, shape [B]: the Gaussian KL for t > 0, the decoder NLL for t = 0."""
    true_mean, _, true_logvar = q_posterior(s, x0, xt, t)
    mean, logvar, _ = p_mean_variance(s, target, variance, xt, t, out, clip_denoised)
    kl = mean_flat(normal_kl(true_mean, true_logvar, mean, logvar)) / LN2
    nll = -mean_flat(discretized_gaussian_log_likelihood(x0, mean, 0.5 * logvar)) / LN2
    return jnp.where(t == 0, nll, kl)


def kl_terms_bpd(s: Schedule, target: str, variance: str, x0, xt, t, out, clip_denoised: bool = False):
    """The Gaussian KL in bits/dim at every t, t = 0 included (what the learned sampler's reward uses, method.md 1.2)."""
    true_mean, _, true_logvar = q_posterior(s, x0, xt, t)
    mean, logvar, _ = p_mean_variance(s, target, variance, xt, t, out, clip_denoised)
    return mean_flat(normal_kl(true_mean, true_logvar, mean, logvar)) / LN2


def prior_bpd(s: Schedule, x0):
    """L_T = KL(q(x_{T-1} | x0) || N(0, I)) in bits/dim, shape [B]."""
    t = jnp.full(x0.shape[:1], s.num_timesteps - 1, jnp.int32)
    mean, _, logvar = q_mean_variance(s, x0, t)
    return mean_flat(normal_kl(mean, logvar, 0.0, 0.0)) / LN2


def bound_terms(apply_fn, s: Schedule, target: str, variance: str, x0, ts, noise, *, kl_only: bool = False,
                clip_denoised: bool = False, max_rows: int = 0):
    """Bound terms for many timesteps at once.

    x0: [B, H, W, C]; ts: [K] int timesteps; noise: [K, B, H, W, C]. Returns [B, K] bits/dim.
    The K copies are folded batch-major (example b's K rows are adjacent), so the new rows stay on the device
    that holds example b when the batch is sharded (style.md pitfalls: vmap over K added an all-gather).
    With max_rows > 0 the timesteps are processed in sequential chunks (lax.map) of at most max(1, max_rows // B)
    timesteps, which bounds peak memory: XLA sizes its scratch memory for the largest branch of the step even on
    steps that do not run it. `apply_fn(xt, t)` runs the network on a flat batch.
    """
    B, K = x0.shape[0], ts.shape[0]
    fn = kl_terms_bpd if kl_only else vb_terms_bpd

    def chunk(ts_c, noise_c):
        k = ts_c.shape[0]
        x0r = jnp.repeat(x0, k, axis=0)  # [B*k, ...], row b*k + j
        tr = jnp.tile(ts_c, B)
        nr = jnp.swapaxes(noise_c, 0, 1).reshape((B * k,) + x0.shape[1:])
        xt = q_sample(s, x0r, tr, nr)
        return fn(s, target, variance, x0r, xt, tr, apply_fn(xt, tr), clip_denoised).reshape(B, k)

    k = K if max_rows <= 0 else max(1, min(K, max_rows // B))
    if k >= K:
        return chunk(ts, noise)
    n = -(-K // k)
    pad = n * k - K
    ts_p = jnp.concatenate([ts, jnp.broadcast_to(ts[:1], (pad,))]).reshape(n, k)
    noise_p = jnp.concatenate([noise, jnp.broadcast_to(noise[:1], (pad,) + noise.shape[1:])]).reshape((n, k) + noise.shape[1:])
    out = jax.lax.map(lambda a: chunk(*a), (ts_p, noise_p))  # [n, B, k]
    return jnp.moveaxis(out, 0, 1).reshape(B, n * k)[:, :K]


def nll_bpd(apply_fn, s: Schedule, target: str, variance: str, x0, key, *, clip_denoised: bool = True,
            max_rows: int = 0):
    """The full bound, NLL <= sum_{t=0}^{T-1} L_t + L_T, in bits/dim per example: [B]. Every t gets its own noise.

    Returns (nll [B], terms [B, T], prior [B]). clip_denoised=True as improved-diffusion's calc_bpd_loop.
    """
    ts = jnp.arange(s.num_timesteps, dtype=jnp.int32)
    noise = jax.random.normal(key, (s.num_timesteps,) + x0.shape, x0.dtype)
    terms = bound_terms(apply_fn, s, target, variance, x0, ts, noise, clip_denoised=clip_denoised, max_rows=max_rows)
    prior = prior_bpd(s, x0)
    return terms.sum(axis=1) + prior, terms, prior


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


def nll_bpd_estimate(apply_fn, s: Schedule, target: str, variance: str, x0, key, num_t: int, *,
                     clip_denoised: bool = True, max_rows: int = 0):
    """An unbiased estimate of nll_bpd's bound from num_t timesteps (stratified_timesteps), per example: [B].
    The noise is drawn as nll_bpd's (normal(key, [num_t, ...])): with num_t = T every stratum is one timestep and
    the estimate is exactly nll_bpd."""
    ts, weights = stratified_timesteps(s.num_timesteps, num_t, jax.random.fold_in(key, 0x7157))
    noise = jax.random.normal(key, (num_t,) + x0.shape, x0.dtype)
    terms = bound_terms(apply_fn, s, target, variance, x0, ts, noise, clip_denoised=clip_denoised, max_rows=max_rows)
    return (terms * weights).sum(axis=1) + prior_bpd(s, x0)
