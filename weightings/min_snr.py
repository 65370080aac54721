"""Min-SNR-gamma weighting (Hang et al. 2023), in the form that matches the process's prediction target:
    eps: w = min(SNR, gamma) / SNR;   v: w = min(SNR, gamma) / (SNR + 1);   x0: w = min(SNR, gamma);
and w = 1 where SNR = 0 (a zero-terminal-SNR step), where the eps and x0 forms would be 0/0 and 0.
Known bugs elsewhere that this does not repeat (method.md section 3): SpeeD's comparison code uses 5 / (SNR + 1)
for every target; diffusers once shipped min(SNR + 1, gamma) / (SNR + 1) for v.
"""

import numpy as np

from core.fields import Num
from weightings.base import WEIGHTINGS, Weighting, snr


def min_snr_weights(s: np.ndarray, gamma: float, target: str) -> np.ndarray:
    clipped = np.minimum(s, gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = {"eps": clipped / s, "v": clipped / (s + 1.0), "x0": clipped}[target]
    return np.where(s > 0, w, 1.0)


@WEIGHTINGS.register
class MinSNR(Weighting):
    name = "min_snr"
    FIELDS = dict(gamma=Num(5.0, 0, lo_open=True, note="(paper: 5)"))  # form follows the process's target

    @classmethod
    def table(cls, cfg, process):
        return min_snr_weights(snr(process), cfg.gamma, process.target)
