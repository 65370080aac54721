"""Ancestral (DDPM) and DDIM sampling of a discrete-time process with lax.scan.

`apply_fn(x, t) -> out` is the network on a batch; t has shape [B]; `out` may carry learned variance channels
(process.out_channels), the samples have the channels of `shape`. `process` gives the reverse-process pieces
(p_mean_variance, predict_x0, predict_eps, its schedule); DDIM uses only the mean part of `out` (predict_x0).
Samples are clipped x0-predictions at every step (clip=True), as in the DDPM and improved-diffusion samplers.
DDIM uses `num_steps` timesteps evenly spaced over 0..T-1 (rounded down, always including 0 and the last step),
eta = 0 by default.
"""

import jax
import jax.numpy as jnp
import numpy as np

METHODS = ("ancestral", "ddim")


def same(x):
    return x


def ancestral(apply_fn, process, key, shape, constrain=same, clip: bool = True):
    """Run all T reverse steps from x_{T-1} ~ the prior (process.prior_sample: N(0, I)). Returns x0 in [-1, 1]
    (clip=False: unclipped, for latents, whose values are not bounded; DiT and the LDM sample latents with
    improved-diffusion's clip_denoised=False). `constrain` (e.g. a sharding constraint over the batch) is applied to
    every array of the sample's shape."""
    key, k0 = jax.random.split(key)
    x = constrain(process.prior_sample(k0, shape))
    T = process.num_timesteps

    def body(x, i):
        t = jnp.full(shape[:1], T - 1 - i, jnp.int32)
        mean, logvar, _ = process.p_mean_variance(x, t, apply_fn(x, t), clip_x0=clip)
        z = constrain(jax.random.normal(jax.random.fold_in(key, i), shape))
        nonzero = (t > 0).astype(x.dtype).reshape(-1, *([1] * (x.ndim - 1)))
        return constrain(mean + nonzero * jnp.exp(0.5 * logvar) * z), None

    x, _ = jax.lax.scan(body, x, jnp.arange(T))
    return jnp.clip(x, -1.0, 1.0) if clip else x


def ddim_timesteps(num_timesteps: int, num_steps: int) -> np.ndarray:
    return np.unique(np.linspace(0, num_timesteps - 1, num_steps).round().astype(np.int32))


def ddim(apply_fn, process, key, shape, num_steps: int, eta: float = 0.0, constrain=same, clip: bool = True):
    """DDIM (Song et al. 2021) over `num_steps` evenly spaced timesteps (clip: as ancestral)."""
    T, alphas_cumprod = process.num_timesteps, process.schedule.alphas_cumprod
    ts = ddim_timesteps(T, num_steps)[::-1]
    prev = np.append(ts[1:], T)  # index T holds alpha_bar = 1
    key, k0 = jax.random.split(key)
    x = constrain(process.prior_sample(k0, shape))
    ab_all = jnp.concatenate([alphas_cumprod, jnp.ones((1,), alphas_cumprod.dtype)])

    def body(x, inp):
        i, t_i, p_i = inp
        t = jnp.full(shape[:1], t_i, jnp.int32)
        x0_hat = process.predict_x0(x, t, apply_fn(x, t))
        x0_hat = jnp.clip(x0_hat, -1.0, 1.0) if clip else x0_hat
        eps = process.predict_eps(x, t, x0_hat)
        ab, ab_prev = ab_all[t_i], ab_all[p_i]
        sigma = eta * jnp.sqrt((1 - ab_prev) / (1 - ab) * (1 - ab / ab_prev))
        z = constrain(jax.random.normal(jax.random.fold_in(key, i), shape))
        x = jnp.sqrt(ab_prev) * x0_hat + jnp.sqrt(jnp.maximum(1 - ab_prev - sigma**2, 0.0)) * eps + sigma * z
        return constrain(x), None

    x, _ = jax.lax.scan(body, x, (jnp.arange(len(ts)), jnp.asarray(ts), jnp.asarray(prev)))
    return jnp.clip(x, -1.0, 1.0) if clip else x
