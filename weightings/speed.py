"""SpeeD's change-aware weighting (Wang et al., arXiv 2405.17403; NUS-HPC-AI-Lab/SpeeD, weighting "ours"),
method.md section 2: with w_raw = np.gradient(1 - alpha_bar),
    w(t) = (1 - lam) + (2 lam - 1) (w_raw(t) - min w_raw) / (max w_raw - min w_raw)   for t < tau,   1 for t >= tau,
min and max taken over all T steps, as the reference does (so on linear the first tau weights span about
[0.41, 0.6], not exactly [0.4, 0.6]). Defaults lam = 0.6, tau = 700 as every SpeeD experiment config; the class
defaults in the reference code (lam = 5) give negative weights and are refused here (lam must lie in [0, 1]).
tau here is the weighting's own field; for SpeeD as published, set it equal to config.sampler.speed.tau.
"""
import numpy as np

from weightings.base import Weighting


def speed_weights(alphas_cumprod: np.ndarray, lam: float, tau: int) -> np.ndarray:
    raw = np.gradient(1.0 - alphas_cumprod)
    w = (1.0 - lam) + (2.0 * lam - 1.0) * (raw - raw.min()) / (raw.max() - raw.min())
    return np.where(np.arange(alphas_cumprod.shape[0]) < tau, w, 1.0)


class SpeedWeighting(Weighting):
    name = "speed"

    @classmethod
    def validate(cls, config):
        w, T = config.weighting.speed, config.diffusion.num_timesteps
        if not 0.0 <= w.lam <= 1.0:
            raise ValueError(f"config.weighting.speed.lam={w.lam} must be in [0, 1] (SpeeD's experiments: 0.6)")
        if not 1 <= w.tau <= T:
            raise ValueError(f"config.weighting.speed.tau={w.tau} must be in 1..{T} (config.diffusion.num_timesteps)")

    @classmethod
    def table(cls, config, schedule):
        w = config.weighting.speed
        return speed_weights(schedule.np64["alphas_cumprod"], w.lam, w.tau)
