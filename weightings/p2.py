"""P2 weighting (Choi et al. 2022): w(t) = 1 / (k + SNR(t))^gamma on the MSE of the model's target
(the paper's settings: gamma in {0.5, 1}, k = 1).

P2 is defined on the eps-MSE (the paper's models predict eps); on the DDPM chain it multiplies whatever target's MSE
as-is (a v- or x0-target run gets the same table). Continuous time carries it over exactly instead
(weightings/base.py): w = SNR / ((k + SNR)^gamma F) = alpha^2 / ((k + SNR)^gamma (c1 sigma - c2 alpha)^2), which is
1 / (k + SNR)^gamma for the eps target and for flow matching's velocity SNR t^2 / (k + SNR)^gamma (the same
objective as P2 on eps); 1 where the denominator is 0.
"""

import jax.numpy as jnp

from config.fields import Num
from weightings.base import WEIGHTINGS, Weighting, per_target, snr


@WEIGHTINGS.register
class P2(Weighting):
    name = "p2"
    continuous = True
    FIELDS = dict(
        gamma=Num(1.0, 0, lo_open=True, note="(paper: 0.5 or 1)"), k=Num(1.0, 0, lo_open=True, note="(paper: 1)")
    )  # 1 / (k + SNR)^gamma

    @classmethod
    def table(cls, cfg, process):
        return 1.0 / (cfg.k + snr(process)) ** cfg.gamma

    @classmethod
    def of_path(cls, cfg, alpha, sigma, c1, c2):
        s = jnp.where(sigma > 0, alpha**2 / jnp.where(sigma > 0, sigma**2, 1.0), jnp.inf)
        return per_target(alpha**2 / (cfg.k + s) ** cfg.gamma, alpha, sigma, c1, c2)
