"""A learner of the time distribution itself, within one run: a Beta(a, b) of t / T (continuous time: of t), no
importance weights, whose (log a, log b) move toward the distribution under which training lowers the bound fastest,
judged by comparing windows of steps (docs/method.md#searching-the-beta-distribution-within-a-run).

Why windows: a reward that is linear in the sampling distribution (a one-step, first-order reduction) is maximised
by a point mass, and a bandit that follows it collapses. The reduction of the bound over W steps trained under a
distribution is not linear in it: a time sampled too often stops paying while the others fall behind. Comparing the
reductions of whole windows is a finite-difference estimate of how the bound's progress depends on (log a, log b).

The search (SPSA with antithetic windows, ABBA order):
- theta = (log a, log b), from (log a0, log b0); each round draws a direction delta in {-1, +1}^2.
- A round is four windows of W steps trained under theta + sigma s_j delta with signs s = (+, -, -, +) in even
  rounds and (-, +, +, -) in odd ones: the ABBA order cancels a linear trend of the reduction over the round, and
  alternating it cancels the bias a convex trend leaves, from one round to the next.
- The bound is estimated at every window's end on a fixed probe: the first `probe_images` images of the batch of
  step 0 (spread over it), `probe_strata` strata of the time domain, their times and noise drawn once (the same rows
  every time: common random numbers), the raw parameters in eval mode: B = mean_i sum_k cells_k row(i, k) cell_share
  in bits/dim (the bound's terms; the chain's t = 0 row its decoder). Window j's reduction r_j = B_start - B_end.
- After a round: g = (r_+ - r_-) / (|r_+| + |r_-|) in [-1, 1] (r_+: the two + windows' sum), scale-free as the
  reductions shrink over training; theta += `step` g delta, clipped into [log `min_param`, log `max_param`].
- Between rounds sampling follows theta's window; the first step (before the first window's end) trains under theta
  itself. Draws: on the chain t = floor(u T) clipped (the cells of samplers/beta.py), in continuous time u kept below
  1; with `uniform_mix` m a share m of the draws uniform instead.

Cost: the probe's P K rows at every window's end (P K / (B W) of a step's examples, 2% with the defaults on the
digits), no gradients. What it optimises is the bound on the probe images' rows, not FID
(docs/benchmarks/confirmation.md: the distribution best for one is not the one best for the other).
"""

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import FieldError, Int, Num
from config.registry import FIXED_SCHEDULE, Need
from samplers.base import SAMPLERS, Sampler
from samplers.beta import draw_unit
from samplers.policy_update import probe_rows

# the sign of each window of a round, by the round's parity: ABBA, then BAAB
SIGNS = np.asarray([[1.0, -1.0, -1.0, 1.0], [-1.0, 1.0, 1.0, -1.0]], np.float32)  # numpy: no backend at import


def round_gradient(r, odd):
    """g in [-1, 1] from a round's four window reductions r [4] (module docstring); odd: the round's parity."""
    s = jnp.asarray(SIGNS)[odd.astype(jnp.int32)]
    plus, minus = jnp.sum(jnp.where(s > 0, r, 0.0)), jnp.sum(jnp.where(s < 0, r, 0.0))
    return (plus - minus) / jnp.maximum(jnp.abs(plus) + jnp.abs(minus), 1e-30)


@SAMPLERS.register
class BetaSearchSampler(Sampler):
    name = "beta_search"
    continuous = True
    FIELDS = dict(
        a0=Num(1.0, 0, lo_open=True, note="the starting Beta(a0, b0); 1, 1 is uniform"),
        b0=Num(1.0, 0, lo_open=True),
        window=Int(50, 1, note="steps per window; a round is four windows"),
        sigma=Num(0.25, 0, lo_open=True, note="the windows' perturbation of log a and log b"),
        step=Num(0.3, 0, note="theta's move per round, at |g| = 1 (log units)"),
        min_param=Num(0.05, 0, lo_open=True, note="a and b stay in [min_param, max_param]"),
        max_param=Num(20.0, 0, lo_open=True),
        probe_images=Int(32, 1, "B"),
        probe_strata=Int(16, 1, "T"),
        probe_chunk_rows=Int(64, 0, note="rows per device at a time when the probe is evaluated (0: all)"),
        uniform_mix=Num(0.0, 0, 1, hi_open=True),
    )

    @classmethod
    def needs(cls, cfg):
        why = "it learns a weighting of the objective; a learned schedule descends the bound only where t is uniform"
        return [*super().needs(cfg), Need(FIXED_SCHEDULE, why=why)]

    @classmethod
    def check(cls, cfg, ctx):
        for field in ("a0", "b0"):
            if not cfg.min_param <= cfg[field] <= cfg.max_param:
                allowed = f"must be in [min_param, max_param] = [{cfg.min_param}, {cfg.max_param}]"
                raise FieldError(field, cfg[field], allowed)
        if ctx["B"] % cfg.probe_images:
            raise FieldError("probe_images", cfg.probe_images, f"must divide config.train.batch_size={ctx['B']}")

    def init(self, key, x0):
        P, K = self.cfg.probe_images, self.cfg.probe_strata
        zero = jnp.zeros((), jnp.float32)
        return dict(
            theta=jnp.log(jnp.asarray([self.cfg.a0, self.cfg.b0], jnp.float32)),
            delta=jnp.ones((2,), jnp.float32),
            windows=jnp.zeros((), jnp.int32),  # window ends seen (the first is step 0's)
            reductions=jnp.zeros((4,), jnp.float32),
            bound=zero,  # the probe's bound at the last window's end
            grad=zero,
            probe=jnp.zeros((P,) + x0.shape[1:], x0.dtype),
            probe_key=jax.random.PRNGKey(0),
            probe_t=jnp.zeros((K,), self.time.dtype),
            probe_cells=jnp.zeros((K,), jnp.float32),
        )

    def params_now(self, state):
        """(a, b) of the current window: theta + sigma s delta (theta itself before the first window's end)."""
        j = state["windows"] - 1
        sign = jnp.where(j >= 0, jnp.asarray(SIGNS)[(j // 4) % 2, j % 4], 0.0)
        ab = jnp.exp(state["theta"] + self.cfg.sigma * sign * state["delta"])
        return ab[0], ab[1]

    def sample(self, state, key, x0):
        B = x0.shape[0]
        a, b = self.params_now(state)
        t = self.time.from_unit(draw_unit(key, a, b, B, self.cfg.uniform_mix), "floor")
        return t, jnp.ones((B,), jnp.float32), {}

    def probe_bound(self, state, ctx, params):
        """The bound's estimate on the fixed probe rows (module docstring), bits/dim: a scalar."""
        P, K = self.cfg.probe_images, self.cfg.probe_strata
        x0 = state["probe"]
        x0r, tr = jnp.repeat(x0, K, axis=0), jnp.tile(state["probe_t"], P)
        noise = self.process.draw_noise(state["probe_key"], x0r)
        rows = ctx.rows_fn(params, x0r, tr, noise, kind="bound", rows_per_device=self.cfg.probe_chunk_rows)
        per_image = jnp.sum(rows.reshape(P, K) * state["probe_cells"], axis=1) * self.time.cell_share
        return jnp.mean(per_image)

    def _window_end(self, state, ctx):
        first = state["windows"] == 0
        k_probe, k_strata, k_delta = jax.random.split(ctx.key, 3)
        t, cells = self.time.strata(k_strata, self.cfg.probe_strata)
        state = dict(
            state,
            probe=jnp.where(first, probe_rows(ctx.x0, self.cfg.probe_images), state["probe"]),
            probe_key=jnp.where(first, k_probe, state["probe_key"]),
            probe_t=jnp.where(first, t.astype(self.time.dtype), state["probe_t"]),
            probe_cells=jnp.where(first, cells, state["probe_cells"]),
        )
        bound = self.probe_bound(state, ctx, ctx.params_after)
        j = state["windows"] - 1  # the window that ends here (-1: none)
        reductions = jnp.where(
            j >= 0, state["reductions"].at[jnp.maximum(j, 0) % 4].set(state["bound"] - bound), state["reductions"]
        )
        round_done = (j >= 0) & (j % 4 == 3)
        g = round_gradient(reductions, (j // 4) % 2 == 1)
        lo, hi = np.log(self.cfg.min_param), np.log(self.cfg.max_param)
        moved = jnp.clip(state["theta"] + self.cfg.step * g * state["delta"], lo, hi)
        theta = jnp.where(round_done, moved, state["theta"])
        fresh = jnp.where(jax.random.bernoulli(k_delta, 0.5, (2,)), 1.0, -1.0)
        delta = jnp.where(round_done | first, fresh, state["delta"])
        return dict(
            state,
            theta=theta,
            delta=delta,
            windows=state["windows"] + 1,
            reductions=reductions,
            bound=bound,
            grad=jnp.where(round_done, g, state["grad"]),
        )

    def period(self):
        return self.cfg.window

    def update(self, state, ctx):
        state = self.on_period(state, ctx, lambda s: self._window_end(s, ctx))
        a, b = jnp.exp(state["theta"])
        return state, dict(a=a, b=b, probe_bound=state["bound"], grad=state["grad"], windows=state["windows"])
