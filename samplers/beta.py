"""A fixed Beta distribution of time: u = t / T (the DDPM chain) or u = t (continuous time) drawn from
q(u) = (1 - m) Beta(u; a, b) + m, with `uniform_mix` m in [0, 1) as a uniform floor. One sampler, both kinds of gain
(docs/method.md#a-fixed-beta-distribution-of-time):
- without importance weights (default) the density re-weights the objective: training minimises
  E_{t ~ q}[loss(t)], the uniform objective with the weighting q(t) over t, as a learned policy does when it walks to
  Beta(a, b) and stays there;
- with `importance_weights` each example's loss is multiplied by u(t) / q(t) (uniform density over its density),
  which keeps the uniform objective and changes only the variance of its estimate.

On the chain, step t receives the q-mass of its "floor" cell [t / T, (t + 1) / T) (diffusion/time.py), the regularised
incomplete beta function I_u(a, b) differenced at the cell edges (in float64), and t is drawn by inverse CDF over that
table; the weight is 1 / (T p(t)). So Beta(1, 1) gives uniform steps (to float64 rounding). The learned policy rounds
its u to the nearest step, round(u (T - 1)) (samplers/adaptive.py): a fixed Beta(a, b) here is its density up to that
half-step shift of the cells, which matters only at the two ends.

In continuous time t is drawn exactly (jax.random.beta, with probability m a uniform draw instead) and kept below 1
(the largest float32 under 1): the mirror images Beta(b, a) with b < 1 put real mass within 6e-8 of 1, where flow
matching's log SNR is -infinity. The weight is 1 / q(t), from the log-density, so it is 0, not NaN, where q is
infinite (u = 0 with a < 1).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import beta as beta_dist
from scipy.special import betainc

from config.fields import Bool, Num
from config.registry import FIXED_SCHEDULE, Need
from samplers.base import SAMPLERS, FixedTableSampler

BELOW_ONE = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def beta_cell_masses(T: int, a: float, b: float, mix: float = 0.0) -> np.ndarray:
    """q-mass of the cells [t / T, (t + 1) / T), t = 0..T-1: [T] float64, summing to 1."""
    cdf = betainc(a, b, np.arange(T + 1) / T)
    cdf[0], cdf[-1] = 0.0, 1.0
    return (1.0 - mix) * np.diff(cdf) + mix / T


def draw_unit(key, a, b, n: int, mix: float):
    """n draws of u from (1 - mix) Beta(a, b) + mix U[0, 1), kept below 1: [n] float32."""
    key_beta, key_mix, key_uniform = jax.random.split(key, 3)
    u = jax.random.beta(key_beta, a, b, (n,), jnp.float32)
    if mix > 0.0:
        pick = jax.random.uniform(key_mix, (n,)) < mix
        u = jnp.where(pick, jax.random.uniform(key_uniform, (n,), jnp.float32), u)
    return jnp.minimum(u, BELOW_ONE)


def beta_fields(default: float, a_note: str, b_note: str) -> dict:
    """The fields of a fixed Beta(a, b) (this sampler's of t, the bell's of a noise level): a, b, importance weights
    and a uniform floor."""
    return dict(
        a=Num(default, 0, lo_open=True, note=a_note),
        b=Num(default, 0, lo_open=True, note=b_note),
        importance_weights=Bool(False),
        uniform_mix=Num(0.0, 0, 1, hi_open=True, note="m: the share of draws that are uniform (a floor under q)"),
    )


def weighting_needs(cfg) -> list:
    """Without importance weights the density re-weights the objective: as the learned sampler's own need says."""
    if cfg.importance_weights:
        return []
    why = "a learned schedule descends the bound only where t is uniform or importance-weighted"
    return [Need(FIXED_SCHEDULE, "importance_weights", False, "True", why)]


def mixture_log_density(u, a, b, mix: float):
    """log q(u) of q = (1 - mix) Beta(a, b) + mix U[0, 1) at u in [0, 1): [B] float32."""
    logp = beta_dist.logpdf(u, a, b)
    return logp if mix == 0.0 else jnp.logaddexp(jnp.log1p(-mix) + logp, jnp.log(mix))


@SAMPLERS.register
class BetaSampler(FixedTableSampler):
    name = "beta"
    continuous = True
    FIELDS = beta_fields(
        1.0, "Beta(a, b) of t / T (continuous: of t); 1, 1 is uniform", "Beta(a, b): mass near t = 0 when a < b"
    )

    @classmethod
    def needs(cls, cfg):
        return super().needs(cfg) + weighting_needs(cfg)

    @classmethod
    def table(cls, cfg, process):
        return beta_cell_masses(process.time.size, cfg.a, cfg.b, cfg.uniform_mix)

    @property
    def importance(self):
        return bool(self.cfg.importance_weights)

    def log_density(self, t):
        """log q(t) for continuous t in [0, 1): [B] float32."""
        return mixture_log_density(t, self.cfg.a, self.cfg.b, self.cfg.uniform_mix)

    def exact(self, key, n):
        return draw_unit(key, self.cfg.a, self.cfg.b, n, self.cfg.uniform_mix)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        t = self.time.draw(key, B, lambda: self.cdf(state), self.exact)
        if not self.importance:
            return t, jnp.ones((B,), jnp.float32), {}
        if self.time.cells == 1:  # continuous: u(t) = 1
            return t, jnp.exp(-self.log_density(t)).astype(jnp.float32), {}
        return t, 1.0 / (self.T * self.probabilities(state)[t]), {}
