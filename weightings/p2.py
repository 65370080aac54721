"""P2 weighting (Choi et al. 2022): w(t) = 1 / (k + SNR(t))^gamma on the MSE of the model's target
(the paper's settings: gamma in {0.5, 1}, k = 1)."""

from core.fields import Num
from weightings.base import WEIGHTINGS, Weighting, snr


@WEIGHTINGS.register
class P2(Weighting):
    name = "p2"
    FIELDS = dict(
        gamma=Num(1.0, 0, lo_open=True, note="(paper: 0.5 or 1)"), k=Num(1.0, 0, lo_open=True, note="(paper: 1)")
    )  # 1 / (k + SNR)^gamma

    @classmethod
    def table(cls, cfg, process):
        return 1.0 / (cfg.k + snr(process)) ** cfg.gamma
