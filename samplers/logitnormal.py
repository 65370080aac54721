"""Logit-normal timestep density (Esser et al. 2024, SD3), on the noise level of the DDPM chain.

The noise level of step t is n_t = sqrt(1 - alpha_bar_t), the variable SpeeD's code (NUS-HPC-AI-Lab/SpeeD) puts
the logit-normal on. The density is evaluated there and normalised over the T steps:
    pi(n) = 1 / (s sqrt(2 pi)) / (n (1 - n)) exp(-(logit(n) - m)^2 / (2 s^2)),   p(t) = pi(n_t) / sum_tau pi(n_tau),
with m = 0, s = 1 by default. It is a sampling density: timesteps are drawn from p with loss weight 1, never drawn
as random loss weights (a known misuse, docs/method.md#logit-normal-sd3). Choices: the density is evaluated at each
step's level, not integrated over cells, without a Jacobian. SpeeD's code also multiplies pi by n / (1 - n) and
writes the exponent as (logit(n) - m)^2 / 2 * s^2 (the same as ours for s = 1); we do neither.
A step whose level is 0 or 1 (a zero-terminal-SNR end) gets probability 0 instead of a division by zero.

Shift (`shift`, `shift_rule`): SD3's timestep shift n' = a n / (1 + (a - 1) n) (Esser et al. 2024, section 5.3.2)
moves the levels toward noise for a > 1. For the logit-normal it is exact and simple: logit(n') = logit(n) + ln a,
so the shifted density is the logit-normal with mean m + ln a, used here in both domains. The factor a is `shift`
("fixed"), or from the size of the data the network sees, H x W (pixels, or latents for a latent model):
"sd3" a = sqrt(H W) / `shift_base` (SD3's sqrt(m / n) with its 256 x 256 base resolution: shift_base 256 for pixels,
32 for f8 latents), "flux" a = exp(mu), mu = 0.5 + (1.15 - 0.5) (L - 256) / (4096 - 256) with L = H W / 4 the
tokens of 2 x 2 patches (Flux's get_lin_function and time_shift in black-forest-labs/flux `sampling.py`; Flux
applies it at sampling, this project to the training density).

Continuous time: n = sigmoid(m + s z), z ~ N(0, 1), is the process's noise coefficient sigma_t, and t its time
(process.t_of_sigma): for flow matching t = n itself (SD3's sampler exactly), for VP the t with sigma_t = n
(clipped into [0, 1] where n is beyond the schedule's ends), the same variable as on the DDPM chain; for EDM the
t whose variance-preserving level sigma / sqrt(1 + sigma^2) is n (diffusion/edm.py).
"""

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import Choice, Int, Num
from samplers.base import SAMPLERS, FixedTableSampler

SHIFT_RULES = ("fixed", "sd3", "flux")


def shift_factor(cfg, height: int, width: int) -> float:
    """SD3's shift a for data of height x width (module docstring)."""
    if cfg.shift_rule == "sd3":
        return float(np.sqrt(height * width) / cfg.shift_base)
    if cfg.shift_rule == "flux":
        tokens = height * width / 4.0
        return float(np.exp(0.5 + (1.15 - 0.5) * (tokens - 256.0) / (4096.0 - 256.0)))
    return float(cfg.shift)


def logitnormal_density(n: np.ndarray, m: float, s: float) -> np.ndarray:
    inside = (n > 0) & (n < 1)
    n_ = np.where(inside, n, 0.5)
    pi = np.exp(-((np.log(n_ / (1 - n_)) - m) ** 2) / (2 * s * s)) / (s * np.sqrt(2 * np.pi) * n_ * (1 - n_))
    return np.where(inside, pi, 0.0)


@SAMPLERS.register
class LogitNormalSampler(FixedTableSampler):
    name = "logitnormal"
    continuous = True
    inverts = True
    FIELDS = dict(
        mean=Num(0.0, note="(SD3: 0)"),
        std=Num(1.0, 0, lo_open=True, note="(SD3: 1)"),
        shift=Num(1.0, 0, lo_open=True, note="SD3's shift with shift_rule='fixed' (1: none; SD3 at 1024^2: 3)"),
        shift_rule=Choice("fixed", SHIFT_RULES),
        shift_base=Int(256, 1, note="the side length whose shift is 1 with shift_rule='sd3'"),
    )

    @classmethod
    def table(cls, cfg, process, shift: float = 1.0):
        pi = logitnormal_density(process.noise_levels_np(), cfg.mean + np.log(shift), cfg.std)
        return pi / pi.sum()

    def shift_of(self, x0) -> float:
        """The shift factor for a batch x0 [B, H, W, C] (static shapes)."""
        return shift_factor(self.cfg, x0.shape[1], x0.shape[2]) if x0.ndim == 4 else float(self.cfg.shift)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        a = self.shift_of(x0)

        def cdf():  # the chain's table at the steps' levels
            if a == 1.0:
                return self.cdf(state)
            p = self.table(self.cfg, self.process, a)
            return jnp.asarray(np.cumsum(p) / np.sum(p), jnp.float32)

        def exact(key, n):  # continuous time: the level drawn, its time by the process's inverse
            level = jax.nn.sigmoid(self.cfg.mean + np.log(a) + self.cfg.std * jax.random.normal(key, (n,), jnp.float32))
            return self.process.t_of_sigma(level)

        return self.time.draw(key, B, cdf, exact), jnp.ones((B,), jnp.float32), {}
