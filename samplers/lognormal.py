"""EDM's log-normal noise levels (Karras et al. 2022), on the discrete DDPM chain: ln sigma ~ N(mean, std^2)
(EDM: -1.2, 1.2), mapped to the step whose sigma_t = sqrt((1 - alpha_bar_t) / alpha_bar_t) is nearest.

The nearest-sigma mapping is this project's choice (method.md section 3): "nearest" is by |sigma - sigma_t| in sigma
itself, so step t receives the probability of the cell between the midpoints of its neighbours' sigmas,
p(t) = Phi((ln hi_t - mean) / std) - Phi((ln lo_t - mean) / std), lo_0 = 0 and hi_{T-1} = infinity: a sigma beyond
the chain's largest one lands on the last step, one below the smallest on step 0. Loss weight 1 (EDM trains at
these noise levels deliberately; its loss weight is a separate axis).
"""
import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ndtr

from samplers.base import FixedTableSampler


def sigmas(schedule) -> np.ndarray:
    ab = schedule.np64["alphas_cumprod"]
    return np.sqrt((1.0 - ab) / ab)


def cell_edges(sig: np.ndarray) -> np.ndarray:
    """The T - 1 midpoints between consecutive sigma_t (increasing in t)."""
    return 0.5 * (sig[1:] + sig[:-1])


def lognormal_probabilities(sig: np.ndarray, mean: float, std: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        z = (np.log(np.concatenate([[0.0], cell_edges(sig), [np.inf]])) - mean) / std
    return np.diff(ndtr(z))


class LogNormalSampler(FixedTableSampler):
    name = "lognormal"

    @classmethod
    def validate(cls, config):
        s = config.sampler.lognormal
        if not s.std > 0:
            raise ValueError(f"config.sampler.lognormal.std={s.std} must be > 0 (EDM: 1.2)")

    @classmethod
    def table(cls, config, schedule):
        s = config.sampler.lognormal
        return lognormal_probabilities(sigmas(schedule), s.mean, s.std)

    def __init__(self, config, schedule):
        super().__init__(config, schedule)
        self.log_edges = jnp.asarray(np.log(cell_edges(sigmas(schedule))), jnp.float32)

    def sample(self, state, key, x0):
        s = self.config.sampler.lognormal
        B = x0.shape[0]
        log_sigma = s.mean + s.std * jax.random.normal(key, (B,), jnp.float32)
        t = jnp.searchsorted(self.log_edges, log_sigma, side="left").astype(jnp.int32)  # midpoints below sigma
        return t, jnp.ones((B,), jnp.float32), {}
