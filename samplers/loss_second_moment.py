"""Importance sampling by the loss's second moment (openai/improved-diffusion `resample.py`,
LossSecondMomentResampler), docs/method.md#importance-sampling-by-the-loss-second-moment.

The state keeps the last H (= 10) losses of every timestep. Until every t has H of them, p is uniform; then
p(t) = (1 - eps) sqrt(mean(loss_t^2)) / sum_tau sqrt(mean(loss_tau^2)) + eps / T, eps = 0.001.
Weights 1 / (T p(t)) keep the weighted loss an unbiased estimate of the uniform one.

The losses recorded are each example's objective before the importance weight: the loss weighting w(t) times the
MSE (improved-diffusion records its unweighted per-example loss; with weighting "none" the two agree). They come
from the global batch, processed in batch order, so every device updates the history identically (the reference
all-gathers the per-GPU losses and processes them in rank order). The history lives in the train state and is
checkpointed.
"""

import jax
import jax.numpy as jnp

from config.fields import Int, Num
from samplers.base import SAMPLERS, TableSampler


@SAMPLERS.register
class LossSecondMomentSampler(TableSampler):
    name = "loss_second_moment"
    importance = True
    FIELDS = dict(
        history=Int(10, 1, note="(reference: 10)"),
        uniform_prob=Num(
            0.001, 0.0, 1.0, lo_open=True, note="(reference: 0.001); 0 would allow p(t) = 0 and infinite weights"
        ),
    )

    def init(self, key, x0):
        H = self.cfg.history
        return dict(history=jnp.zeros((self.T, H), jnp.float32), count=jnp.zeros((self.T,), jnp.int32))

    def probabilities(self, state):
        eps = self.cfg.uniform_prob
        H = state["history"].shape[1]
        w = jnp.sqrt(jnp.mean(state["history"] ** 2, axis=1))
        ready = jnp.all(state["count"] >= H) & (jnp.sum(w) > 0)
        p = (1.0 - eps) * w / jnp.where(ready, jnp.sum(w), 1.0) + eps / self.T
        return jnp.where(ready, p, jnp.full((self.T,), 1.0 / self.T, jnp.float32))

    def update(self, state, ctx):
        H = state["history"].shape[1]

        def record(s, tl):
            t, loss = tl
            hist = s["history"].at[t, s["count"][t] % H].set(loss)
            return dict(history=hist, count=s["count"].at[t].add(1)), None

        state, _ = jax.lax.scan(record, state, (ctx.t, ctx.losses.astype(jnp.float32)))
        p = self.probabilities(state)
        return state, dict(ready=jnp.mean((state["count"] >= H).astype(jnp.float32)), p_max_ratio=jnp.max(p) * self.T)
