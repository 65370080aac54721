"""Min-SNR-gamma weighting (Hang et al. 2023), in the form that matches the process's prediction target:
    eps: w = min(SNR, gamma) / SNR;   v: w = min(SNR, gamma) / (SNR + 1);   x0: w = min(SNR, gamma);
and w = 1 where SNR = 0 (a zero-terminal-SNR step), where the eps and x0 forms would be 0/0 and 0.
Known bugs elsewhere that this does not repeat (docs/method.md#known-defects-of-public-code): SpeeD's comparison
code uses 5 / (SNR + 1) for every target; diffusers once shipped min(SNR + 1, gamma) / (SNR + 1) for v.

Continuous time (weightings/base.py): the three forms are one, min(SNR, gamma) on the x0-MSE, i.e.
w = min(SNR, gamma) / F = min(alpha^2, gamma sigma^2) / (c1 sigma - c2 alpha)^2 for any target; for flow matching's
velocity w = min(SNR, gamma) t^2 (= min(SNR, gamma) / (1 + sqrt(SNR))^2). Where the denominator is 0 (the eps
form at SNR = 0) w = 1, as in the discrete table; the x0, v and velocity forms give 0 at SNR = 0 (a single point,
e.g. a flow's t = 1), where the discrete table has 1.
"""

import jax.numpy as jnp
import numpy as np

from config.fields import Num
from weightings.base import WEIGHTINGS, Weighting, per_target, snr


def min_snr_weights(s: np.ndarray, gamma: float, target: str) -> np.ndarray:
    clipped = np.minimum(s, gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = {"eps": clipped / s, "v": clipped / (s + 1.0), "x0": clipped}[target]
    return np.where(s > 0, w, 1.0)


@WEIGHTINGS.register
class MinSNR(Weighting):
    name = "min_snr"
    continuous = True
    FIELDS = dict(gamma=Num(5.0, 0, lo_open=True, note="(paper: 5)"))  # form follows the process's target

    @classmethod
    def table(cls, cfg, process):
        return min_snr_weights(snr(process), cfg.gamma, process.target)

    @classmethod
    def of_path(cls, cfg, alpha, sigma, c1, c2):
        return per_target(jnp.minimum(alpha**2, cfg.gamma * sigma**2), alpha, sigma, c1, c2)
