"""EDM's log-normal noise levels (Karras et al. 2022), on the discrete DDPM chain: ln sigma ~ N(mean, std^2)
(EDM: -1.2, 1.2), mapped to the step whose sigma_t = sqrt((1 - alpha_bar_t) / alpha_bar_t) is nearest.

The nearest-sigma mapping is our choice (docs/method.md#log-normal-edm): "nearest" is by |sigma - sigma_t| in sigma
itself, so step t receives the probability of the cell between the midpoints of its neighbours' sigmas,
p(t) = Phi((ln hi_t - mean) / std) - Phi((ln lo_t - mean) / std), lo_0 = 0 and hi_{T-1} = infinity: a sigma beyond
the chain's largest one lands on the last step, one below the smallest on step 0. Loss weight 1 (EDM trains at
these noise levels deliberately; its loss weight is a separate axis).

Both domains: sigma = exp(ln sigma) is EDM's noise level, the inverse square root of the SNR, so
log SNR = -2 ln sigma and t = process.t_of_logsnr(-2 ln sigma): on the chain the nearest step above (ddpm.py), in
continuous time (clipped into [0, 1] beyond a VP schedule's ends;
for flow matching t = sigma / (1 + sigma)). Exact: no nearest-step rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ndtr

from config.fields import Num
from samplers.base import SAMPLERS, FixedTableSampler


def sigmas(process) -> np.ndarray:
    """EDM's sigma of every step of a chain, sqrt((1 - alpha_bar) / alpha_bar): [T] float64."""
    ab = process.alphas_cumprod_np()
    return np.sqrt((1.0 - ab) / ab)


def cell_edges(sig: np.ndarray) -> np.ndarray:
    """The T - 1 midpoints between consecutive sigma_t (increasing in t)."""
    return 0.5 * (sig[1:] + sig[:-1])


def lognormal_probabilities(sig: np.ndarray, mean: float, std: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        z = (np.log(np.concatenate([[0.0], cell_edges(sig), [np.inf]])) - mean) / std
    return np.diff(ndtr(z))


@SAMPLERS.register
class LogNormalSampler(FixedTableSampler):
    name = "lognormal"
    continuous = True
    inverts = True
    gaussian = True  # EDM's sigma of a Gaussian path
    FIELDS = dict(mean=Num(-1.2, note="(EDM: -1.2)"), std=Num(1.2, 0, lo_open=True, note="(EDM: 1.2)"))

    @classmethod
    def table(cls, cfg, process):
        return lognormal_probabilities(sigmas(process), cfg.mean, cfg.std)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        log_sigma = self.cfg.mean + self.cfg.std * jax.random.normal(key, (B,), jnp.float32)
        # on the chain the step of the nearest sigma (module docstring), in continuous time exact
        return self.process.t_of_logsnr(-2.0 * log_sigma), jnp.ones((B,), jnp.float32), {}
