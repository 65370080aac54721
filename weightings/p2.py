"""P2 weighting (Choi et al. 2022): w(t) = 1 / (k + SNR(t))^gamma on the MSE of the model's target
(the paper's settings: gamma in {0.5, 1}, k = 1)."""
from weightings.base import Weighting, snr


class P2(Weighting):
    name = "p2"

    @classmethod
    def validate(cls, config):
        w = config.weighting.p2
        if not w.gamma > 0:
            raise ValueError(f"config.weighting.p2.gamma={w.gamma} must be > 0 (paper: 0.5 or 1)")
        if not w.k > 0:
            raise ValueError(f"config.weighting.p2.k={w.k} must be > 0 (paper: 1)")

    @classmethod
    def table(cls, config, schedule):
        w = config.weighting.p2
        return 1.0 / (w.k + snr(schedule)) ** w.gamma
