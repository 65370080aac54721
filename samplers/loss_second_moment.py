"""Importance sampling by the loss's second moment (openai/improved-diffusion `resample.py`,
LossSecondMomentResampler), docs/method.md#importance-sampling-by-the-loss-second-moment.

The state keeps the last H (= 10) losses of every timestep. Until every t has H of them, p is uniform; then
p(t) = (1 - eps) sqrt(mean(loss_t^2)) / sum_tau sqrt(mean(loss_tau^2)) + eps / T, eps = 0.001.
Weights 1 / (T p(t)) keep the weighted loss an unbiased estimate of the uniform one.

Continuous time (the masked process; P-POTS, Jia et al. 2026, arXiv 2511.18159, samples masked diffusion's time by
the same sqrt(mean^2 + var) = sqrt(E loss^2) on a grid of t, with importance weights and a uniform mixture): the
same rule over `num_bins` equal cells of t in place of the chain's steps, t uniform within its cell, weight
1 / (num_bins p(cell)). P-POTS then fits a smooth parametric density to the grid's values; this sampler keeps the
cells' own (the reference's rule), and the cell count (100: about 1,000 examples before it leaves uniform) is this
project's choice.

The losses recorded are each example's objective before the importance weight: the loss weighting w(t) times the
MSE (improved-diffusion records its unweighted per-example loss; with weighting "none" the two agree). They come
from the global batch, processed in batch order, so every device updates the history identically (the reference
all-gathers the per-GPU losses and processes them in rank order). The history lives in the train state and is
checkpointed.
"""

import jax
import jax.numpy as jnp

from config.fields import Int, Num
from diffusion.time import cdf_of, inverse_cdf
from samplers.base import SAMPLERS, TableSampler


@SAMPLERS.register
class LossSecondMomentSampler(TableSampler):
    name = "loss_second_moment"
    continuous = True
    importance = True
    FIELDS = dict(
        history=Int(10, 1, note="(reference: 10)"),
        uniform_prob=Num(
            0.001, 0.0, 1.0, lo_open=True, note="(reference: 0.001); 0 would allow p(t) = 0 and infinite weights"
        ),
        num_bins=Int(100, 1, note="continuous time: equal cells of t, each with its history (chain: every step)"),
    )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        # the table's entries: the chain's steps, or num_bins cells of continuous t (time.cells is 1 there)
        self.cells = self.T if self.time.cells > 1 else int(cfg.num_bins)

    def init(self, key, x0):
        H = self.cfg.history
        return dict(history=jnp.zeros((self.cells, H), jnp.float32), count=jnp.zeros((self.cells,), jnp.int32))

    def probabilities(self, state):
        """p [cells]: of each step on the chain, of each cell of t in continuous time."""
        eps, n = self.cfg.uniform_prob, self.cells
        H = state["history"].shape[1]
        w = jnp.sqrt(jnp.mean(state["history"] ** 2, axis=1))
        ready = jnp.all(state["count"] >= H) & (jnp.sum(w) > 0)
        p = (1.0 - eps) * w / jnp.where(ready, jnp.sum(w), 1.0) + eps / n
        return jnp.where(ready, p, jnp.full((n,), 1.0 / n, jnp.float32))

    def sample(self, state, key, x0):
        B, n = x0.shape[0], self.cells
        p = self.probabilities(state)

        def within(key, count):  # continuous time: a cell by inverse CDF, then t uniform in it
            k_cell, k_within = jax.random.split(key)
            cell = inverse_cdf(k_cell, cdf_of(p), count)
            return jnp.clip((cell + jax.random.uniform(k_within, (count,), jnp.float32)) / n, 0.0, 1.0)

        t = self.time.draw(key, B, lambda: self.cdf(state), within)
        return t, 1.0 / (n * p[self.time.bins(t, n)]), {}

    def update(self, state, ctx):
        H = state["history"].shape[1]

        def record(s, tl):
            c, loss = tl
            hist = s["history"].at[c, s["count"][c] % H].set(loss)
            return dict(history=hist, count=s["count"].at[c].add(1)), None

        cells = self.time.bins(ctx.t, self.cells)  # on the chain the steps themselves
        state, _ = jax.lax.scan(record, state, (cells, ctx.losses.astype(jnp.float32)))
        p = self.probabilities(state)
        ready = jnp.mean((state["count"] >= H).astype(jnp.float32))
        return state, dict(ready=ready, p_max_ratio=jnp.max(p) * self.cells)
