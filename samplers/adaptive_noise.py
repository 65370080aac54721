"""The adaptive noise schedule of Kingma & Gao 2023 ("Understanding Diffusion Objectives as the ELBO with Simple
Data Augmentation", arXiv 2303.00848): importance sampling of the noise level with a density that follows the loss.

Every objective is an expectation over the noise level; drawing the level from a density p and weighting each
example's loss by (its density under the objective) / p leaves the objective unchanged and changes only the variance
of its estimate. Kingma & Gao adapt p during training to be proportional to the expected weighted loss at each log
SNR, p(lambda) proportional to E_{x, eps}[w(lambda) |eps - eps_hat|^2], estimated by a histogram over lambda with
running averages. Here, on the DDPM chain:

    bins:   num_bins equal bins of log SNR between the chain's smallest and largest lambda_t (lambda_t = log SNR(t));
            bin b holds n_b timesteps (bins that hold none get no mass);
    state:  m_b, a running mean of the loss of the examples whose timestep fell in bin b: m_b <- decay m_b +
            (1 - decay) mean_b over the batch's examples in b (the first time a bin is seen, m_b = mean_b); the
            loss is each example's objective before any importance weight, w(t) MSE (ctx.losses);
    density: q_b = (1 - eps) m_b / sum m + eps n_b / T over the bins, spread evenly over their timesteps:
            p(t) = q_b(t) / n_b(t); uniform until every non-empty bin has been seen;
    weights: 1 / (T p(t)), so that E_p[weight loss] is the uniform objective (tested exactly).

Choices this project made, written down: the histogram's bin count (`num_bins` 100) and running-average decay
(`decay` 0.99) are not taken from a public implementation (none was found); the uniform mixture eps
(`uniform_prob` 0.001, as improved-diffusion's importance sampler) keeps every weight finite; the density is over
timesteps of the chain (each bin's mass split evenly over its timesteps), not over a continuous lambda. Discrete
time only (validation refuses it with a continuous-time process). The state is updated identically on every device
from the global batch and is checkpointed, as the other samplers' state.
"""

import jax.numpy as jnp
import numpy as np

from core.fields import Int, Num
from samplers.base import SAMPLERS, TableSampler


def logsnr_bins(alphas_cumprod: np.ndarray, num_bins: int) -> np.ndarray:
    """The log-SNR bin (0 .. num_bins - 1) of each timestep: equal bins between the chain's extreme log SNRs. [T]"""
    lam = np.log(alphas_cumprod) - np.log1p(-alphas_cumprod)
    lo, hi = lam.min(), lam.max()
    b = np.floor((lam - lo) / (hi - lo) * num_bins).astype(np.int64)
    return np.clip(b, 0, num_bins - 1)


@SAMPLERS.register
class AdaptiveNoiseSampler(TableSampler):
    name = "adaptive_noise"
    importance = True
    FIELDS = dict(
        num_bins=Int(100, 1, "T"),  # log-SNR bins of the histogram
        decay=Num(0.99, 0.0, 1.0, hi_open=True),  # running average of each bin's loss
        uniform_prob=Num(0.001, 0.0, 1.0, lo_open=True, note="mixture with uniform; keeps the weights finite"),
    )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        bins = logsnr_bins(process.schedule.np64["alphas_cumprod"], cfg.num_bins)
        self.bin_of = jnp.asarray(bins, jnp.int32)  # [T]
        self.sizes = jnp.asarray(np.bincount(bins, minlength=cfg.num_bins), jnp.float32)  # n_b

    def init(self, key, x0):
        nb = self.cfg.num_bins
        return dict(mean=jnp.zeros((nb,), jnp.float32), seen=jnp.zeros((nb,), bool))

    def bin_probabilities(self, state):
        """q_b over the bins: [num_bins]."""
        eps = self.cfg.uniform_prob
        nonempty = self.sizes > 0
        ready = jnp.all(state["seen"] | ~nonempty) & (jnp.sum(state["mean"]) > 0)
        m = jnp.where(nonempty, state["mean"], 0.0)
        q = (1.0 - eps) * m / jnp.where(ready, jnp.sum(m), 1.0) + eps * self.sizes / self.T
        return jnp.where(ready, q, self.sizes / self.T)

    def probabilities(self, state):
        q = self.bin_probabilities(state)
        return q[self.bin_of] / self.sizes[self.bin_of]

    def update(self, state, ctx):
        b = self.bin_of[ctx.t]
        nb = self.cfg.num_bins
        total = jnp.zeros((nb,), jnp.float32).at[b].add(ctx.losses.astype(jnp.float32))
        count = jnp.zeros((nb,), jnp.float32).at[b].add(1.0)
        here = count > 0
        batch_mean = total / jnp.maximum(count, 1.0)
        d = self.cfg.decay
        mean = jnp.where(
            here, jnp.where(state["seen"], d * state["mean"] + (1.0 - d) * batch_mean, batch_mean), state["mean"]
        )
        state = dict(mean=mean, seen=state["seen"] | here)
        p = self.probabilities(state)
        return state, dict(
            ready=jnp.mean((state["seen"] | (self.sizes == 0)).astype(jnp.float32)), p_max_ratio=jnp.max(p) * self.T
        )
