"""Timesteps drawn in proportion to a running estimate of the per-timestep gradient variance: the ablation of
Kim et al. (CVPR 2025, section on alternatives; FID 11.3 vs 2.94 at 1.0M iterations), kept as a negative baseline;
and, with `estimate=rms` and importance weights, the variance-optimal marginal proposal
(docs/method.md#two-kinds-of-gain-and-the-variance-optimal-proposal), learned online.

The paper states the idea, not an estimator; this one is ours, written down here:
- T is cut into `num_bins` bins, bin(t) = t * num_bins // T (as the timestep histogram).
- Every `update_every` steps (the first included), for every bin b: two images of the batch, each with its own
  timestep drawn uniformly in b, noise and dropout mask; their per-example gradients g1, g2 of the objective
  w(t) * MSE at the current parameters; with `estimate=variance`, v_b = |g1 - g2|^2 / 2, an unbiased estimate of the
  trace of the gradient covariance within the bin (E|g1 - g2|^2 = 2 tr Cov for independent draws); with
  `estimate=rms`, v_b = (|g1|^2 + |g2|^2) / 2, an unbiased estimate of the bin's mean second moment E|g|^2.
- A running estimate per bin: an exponential moving average of v_b with `decay`, bias-corrected by the number of
  updates (as Adam's moments are).
- p(bin) = (1 - eps) s_b / sum + eps / num_bins, spread uniformly over the bin's timesteps, with s_b = max(v_b, 0)
  (`variance`) or s_b = n_b sqrt(v_b), n_b the bin's number of timesteps (`rms`: among densities constant on each
  bin, the one that minimises the importance-weighted gradient's second moment sum_b n_b^2 E_b|g|^2 / (T^2 p(b)) is
  p(b) proportional to n_b sqrt(E_b|g|^2), by Cauchy-Schwarz; Alain et al. 2015); uniform until the first update.
  Loss weight 1 (as in the paper's ablation, the density re-weights the objective), or 1 / (T p(t)) with
  `importance_weights` (the variance-optimal proposal needs them: without, it changes the objective instead).
The probe costs 2 num_bins per-example gradients every `update_every` steps, computed bin by bin (lax.map) on
those steps only.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from config.fields import Bool, Choice, FieldError, Int, Num
from samplers.base import SAMPLERS, TableSampler


@SAMPLERS.register
class GradVarianceSampler(TableSampler):
    name = "grad_variance"
    FIELDS = dict(
        num_bins=Int(20, 1, "T"),
        update_every=Int(40, 1, mutable=True),
        decay=Num(0.9, 0.0, 1.0, hi_open=True),
        uniform_prob=Num(0.001, 0.0, 1.0, lo_open=True),
        importance_weights=Bool(False),
        estimate=Choice("variance", ("variance", "rms")),
    )

    @classmethod
    def check(cls, cfg, ctx):
        if ctx["B"] < 2:  # two images per bin
            raise FieldError(
                "num_bins",
                cfg.num_bins,
                f"needs a batch of at least 2 images (two per bin); config.train.batch_size is {ctx['B']}",
            )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.importance = bool(cfg.importance_weights)
        nb = self.cfg.num_bins
        bins = np.arange(self.T) * nb // self.T
        self.bin_of_t = jnp.asarray(bins, jnp.int32)
        self.bin_size = jnp.asarray(np.bincount(bins, minlength=nb), jnp.float32)
        self.bin_start = jnp.asarray(np.searchsorted(bins, np.arange(nb)), jnp.int32)

    def init(self, key, x0):
        nb = self.cfg.num_bins
        return dict(
            ema=jnp.zeros((nb,), jnp.float32), updates=jnp.zeros((), jnp.int32), last=jnp.zeros((nb,), jnp.float32)
        )

    def bin_probabilities(self, state):
        nb, eps = self.cfg.num_bins, self.cfg.uniform_prob
        est = jnp.maximum(state["ema"], 0.0)
        if self.cfg.estimate == "rms":
            est = self.bin_size * jnp.sqrt(est)
        ready = (state["updates"] > 0) & (jnp.sum(est) > 0)
        p = (1.0 - eps) * est / jnp.where(ready, jnp.sum(est), 1.0) + eps / nb
        return jnp.where(ready, p, jnp.full((nb,), 1.0 / nb, jnp.float32))

    def probabilities(self, state):
        return (self.bin_probabilities(state) / self.bin_size)[self.bin_of_t]

    def _estimate(self, state, ctx):
        nb, B = self.cfg.num_bins, ctx.x0.shape[0]

        def one_loss(p, x, t, n, k, y):
            labels = {} if y is None else {"y": y[None]}  # a class-conditional model's labels
            return ctx.objective(p, x[None], t[None], n[None], k, **labels)[0][0]

        grad_one = jax.grad(one_loss)
        per_example = jax.vmap(grad_one, in_axes=(None, 0, 0, 0, 0, None if ctx.y is None else 0))

        def one_bin(args):
            b, key = args
            k_img, k_t, k_noise, k_drop = jax.random.split(key, 4)
            idx = jax.random.choice(k_img, B, (2,), replace=False)
            t = self.bin_start[b] + jnp.floor(jax.random.uniform(k_t, (2,)) * self.bin_size[b]).astype(jnp.int32)
            x = ctx.x0[idx]
            y = None if ctx.y is None else ctx.y[idx]
            grads = per_example(
                ctx.params_before, x, t, self.process.draw_noise(k_noise, x), jax.random.split(k_drop, 2), y
            )
            if self.cfg.estimate == "rms":
                return jnp.mean(jax.vmap(lambda g: optax.tree.norm(g, squared=True))(grads))
            diff = jax.tree.map(lambda a: a[0] - a[1], grads)
            return optax.tree.norm(diff, squared=True) / 2.0

        v = jax.lax.map(one_bin, (jnp.arange(nb), jax.random.split(ctx.key, nb)))
        d = self.cfg.decay
        n = state["updates"] + 1
        ema_raw = d * state["ema"] * (1.0 - d ** (n - 1).astype(jnp.float32)) + (1.0 - d) * v
        return dict(ema=ema_raw / (1.0 - d ** n.astype(jnp.float32)), updates=n, last=v)

    def period(self):
        return self.cfg.update_every

    def update(self, state, ctx):
        state = self.on_period(state, ctx, lambda s: self._estimate(s, ctx))
        p = self.bin_probabilities(state)
        return state, dict(updates=state["updates"], p_max_ratio=jnp.max(p) * self.cfg.num_bins)
