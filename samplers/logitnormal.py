"""Logit-normal timestep density (Esser et al. 2024, SD3), on the noise level of the DDPM chain.

The noise level of step t is n_t = sqrt(1 - alpha_bar_t), the variable SpeeD's code (NUS-HPC-AI-Lab/SpeeD) puts
the logit-normal on. The density is evaluated there and normalised over the T steps:
    pi(n) = 1 / (s sqrt(2 pi)) / (n (1 - n)) exp(-(logit(n) - m)^2 / (2 s^2)),   p(t) = pi(n_t) / sum_tau pi(n_tau),
with m = 0, s = 1 by default. It is a sampling density: timesteps are drawn from p with loss weight 1, never drawn
as random loss weights (a known misuse, docs/method.md#logit-normal-sd3). Choices: the density is evaluated at each
step's level, not integrated over cells, without a Jacobian. SpeeD's code also multiplies pi by n / (1 - n) and
writes the exponent as (logit(n) - m)^2 / 2 * s^2 (the same as ours for s = 1); we do neither.
A step whose level is 0 or 1 (a zero-terminal-SNR end) gets probability 0 instead of a division by zero.

Continuous time: n = sigmoid(m + s z), z ~ N(0, 1), is the process's noise coefficient sigma_t, and t its time
(process.t_of_sigma): for flow matching t = n itself (SD3's sampler exactly), for VP the t with sigma_t = n
(clipped into [0, 1] where n is beyond the schedule's ends), the same variable as on the DDPM chain.
"""

import jax
import jax.numpy as jnp
import numpy as np

from core.fields import Num
from samplers.base import SAMPLERS, FixedTableSampler


def logitnormal_density(n: np.ndarray, m: float, s: float) -> np.ndarray:
    inside = (n > 0) & (n < 1)
    n_ = np.where(inside, n, 0.5)
    pi = np.exp(-((np.log(n_ / (1 - n_)) - m) ** 2) / (2 * s * s)) / (s * np.sqrt(2 * np.pi) * n_ * (1 - n_))
    return np.where(inside, pi, 0.0)


@SAMPLERS.register
class LogitNormalSampler(FixedTableSampler):
    name = "logitnormal"
    continuous = True
    FIELDS = dict(mean=Num(0.0, note="(SD3: 0)"), std=Num(1.0, 0, lo_open=True, note="(SD3: 1)"))

    @classmethod
    def table(cls, cfg, process):
        pi = logitnormal_density(process.schedule.np64["sqrt_one_minus_alphas_cumprod"], cfg.mean, cfg.std)
        return pi / pi.sum()

    def sample(self, state, key, x0):
        if self.discrete:
            return super().sample(state, key, x0)
        B = x0.shape[0]
        n = jax.nn.sigmoid(self.cfg.mean + self.cfg.std * jax.random.normal(key, (B,), jnp.float32))
        return self.process.t_of_sigma(n), jnp.ones((B,), jnp.float32), {}
