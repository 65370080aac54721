"""Noise schedules and the constants derived from them.

Sources: Ho et al. 2020 (linear), Nichol & Dhariwal 2021 (cosine; openai/improved-diffusion
`gaussian_diffusion.py`), the quad schedule of the DDPM reference code (beta = linspace(sqrt(b0), sqrt(b1))^2).

Choices a formula leaves open, written down:
- linear and quad are stated for T = 1000 with beta from 1e-4 to 0.02 (sd and ldm: SCALED_LINEAR's ends). For
  other T we scale both ends by
  1000 / T, as improved-diffusion's `get_named_beta_schedule` does for linear, so that alpha_bar_T stays near zero.
  For T = 1000 the tables equal the reference ones exactly.
- cosine uses s = 0.008 and clips beta at 0.999; alpha_bar is recomputed as the cumulative product of the clipped
  betas (as improved-diffusion does), not taken from the closed form.
- All tables are computed in float64 with numpy and stored as float32 jax arrays (the bound is evaluated in float32).
"""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

SCHEDULES = ("linear", "cosine", "quad", "sd", "ldm")
# quad-form ("scaled linear": beta = linspace(sqrt(b0), sqrt(b1), T)^2) schedules of the latent models, for T = 1000:
# sd: Stable Diffusion's (0.00085, 0.012), which U-ViT's discrete ImageNet-256 runs use
# (baofff/U-ViT libs: stable_diffusion_beta_schedule); ldm: the LDM CelebA-HQ config's (0.0015, 0.0195)
# (CompVis/latent-diffusion configs/latent-diffusion/celebahq-ldm-vq-4.yaml, "linear" there meaning this form).
SCALED_LINEAR = dict(quad=(1e-4, 0.02), sd=(0.00085, 0.012), ldm=(0.0015, 0.0195))


def betas_for(name: str, num_timesteps: int) -> np.ndarray:
    """Return beta_t, t = 0..T-1, float64."""
    T = num_timesteps
    scale = 1000.0 / T
    if name == "linear":
        return np.linspace(scale * 1e-4, scale * 0.02, T, dtype=np.float64)
    if name in SCALED_LINEAR:
        b0, b1 = SCALED_LINEAR[name]
        return np.linspace(math.sqrt(scale * b0), math.sqrt(scale * b1), T, dtype=np.float64) ** 2
    if name == "cosine":
        f = lambda u: np.cos((u + 0.008) / 1.008 * np.pi / 2) ** 2
        i = np.arange(T, dtype=np.float64)
        return np.minimum(1.0 - f((i + 1) / T) / f(i / T), 0.999)
    raise ValueError(f"schedule {name!r} is not one of {', '.join(SCHEDULES)}")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Per-timestep constants (each shape [T], float32 jax arrays unless noted)."""

    betas: jnp.ndarray
    alphas_cumprod: jnp.ndarray
    alphas_cumprod_prev: jnp.ndarray
    sqrt_alphas_cumprod: jnp.ndarray
    sqrt_one_minus_alphas_cumprod: jnp.ndarray
    one_minus_alphas_cumprod: jnp.ndarray  # 1 - alpha_bar and its log from float64, as improved-diffusion keeps them:
    log_one_minus_alphas_cumprod: jnp.ndarray  # in float32 at call time, 1 - alpha_bar_0 is off by 1.7e-4 relative
    sqrt_recip_alphas_cumprod: jnp.ndarray
    sqrt_recipm1_alphas_cumprod: jnp.ndarray
    posterior_variance: jnp.ndarray
    posterior_log_variance_clipped: jnp.ndarray
    posterior_mean_coef1: jnp.ndarray
    posterior_mean_coef2: jnp.ndarray
    snr: jnp.ndarray
    np64: dict  # the same tables in float64 numpy, for host-side computations and tests

    @property
    def num_timesteps(self) -> int:
        return int(self.betas.shape[0])


def make_schedule(name: str, num_timesteps: int = 1000) -> Schedule:
    b = betas_for(name, num_timesteps)
    a = 1.0 - b
    ab = np.cumprod(a)
    ab_prev = np.append(1.0, ab[:-1])
    post_var = b * (1.0 - ab_prev) / (1.0 - ab)
    # post_var[0] is 0: improved-diffusion replaces its log by the log of post_var[1].
    post_logvar = np.log(np.append(post_var[1], post_var[1:]))
    with np.errstate(divide="ignore"):
        snr = ab / (1.0 - ab)
    tables = dict(
        betas=b,
        alphas_cumprod=ab,
        alphas_cumprod_prev=ab_prev,
        sqrt_alphas_cumprod=np.sqrt(ab),
        sqrt_one_minus_alphas_cumprod=np.sqrt(1.0 - ab),
        one_minus_alphas_cumprod=1.0 - ab,
        log_one_minus_alphas_cumprod=np.log(1.0 - ab),
        sqrt_recip_alphas_cumprod=np.sqrt(1.0 / ab),
        sqrt_recipm1_alphas_cumprod=np.sqrt(1.0 / ab - 1.0),
        posterior_variance=post_var,
        posterior_log_variance_clipped=post_logvar,
        posterior_mean_coef1=b * np.sqrt(ab_prev) / (1.0 - ab),
        posterior_mean_coef2=(1.0 - ab_prev) * np.sqrt(a) / (1.0 - ab),
        snr=snr,
    )
    return Schedule(**{k: jnp.asarray(v, jnp.float32) for k, v in tables.items()}, np64=tables)
