"""SpeeD's change-aware weighting (Wang et al., arXiv 2405.17403; NUS-HPC-AI-Lab/SpeeD, weighting "ours"),
docs/method.md#speed-weighting: with w_raw = np.gradient(1 - alpha_bar),
    w(t) = (1 - lam) + (2 lam - 1) (w_raw(t) - min w_raw) / (max w_raw - min w_raw)   for t < tau,   1 for t >= tau,
min and max taken over all T steps, as the reference does (so on linear the first tau weights span about
[0.41, 0.6], not exactly [0.4, 0.6]). Defaults lam = 0.6, tau = 700 as every SpeeD experiment config; the class
defaults in the reference code (lam = 5) give negative weights and are refused here (lam must lie in [0, 1]).
tau here is the weighting's own field (config.weighting.speed.tau); for SpeeD as published, set it equal to the
sampler's (config.sampler.speed.tau).
"""

import numpy as np

from config.fields import Int, Num
from weightings.base import WEIGHTINGS, Weighting


def speed_weights(alphas_cumprod: np.ndarray, lam: float, tau: int) -> np.ndarray:
    raw = np.gradient(1.0 - alphas_cumprod)
    w = (1.0 - lam) + (2.0 * lam - 1.0) * (raw - raw.min()) / (raw.max() - raw.min())
    return np.where(np.arange(alphas_cumprod.shape[0]) < tau, w, 1.0)


@WEIGHTINGS.register
class SpeedWeighting(Weighting):
    name = "speed"
    FIELDS = dict(lam=Num(0.6, 0.0, 1.0, note="(SpeeD's experiments: 0.6)"), tau=Int(700, 1, "T"))

    @classmethod
    def table(cls, cfg, process):
        return speed_weights(process.alphas_cumprod_np(), cfg.lam, cfg.tau)
