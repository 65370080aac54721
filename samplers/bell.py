"""Bell-shaped time sampling (Hong et al. 2026, "Understanding and Accelerating the Training of Masked Diffusion
Language Models", arXiv 2605.13026), docs/method.md#bell-shaped-masking-rates: t drawn so that the masking rate
concentrates on middle values, where a masked token has the local context that language's locality bias makes
predictive; the paper reports LM1B's validation NLL reached about 4x sooner than with uniform t.

The density is an assumption. The paper's abstract names a bell-shaped distribution of time; its family, parameters
and whether the loss is reweighted could not be read (only the abstract was found). This sampler draws the process's
noise level n (diffusion/base.py NoiseLevel: the masking rate 1 - alpha on the masked process) from
    q(n) = (1 - m) Beta(n; a, b) + m,      default a = b = 3, m = `uniform_mix` 0,
a bell with mean and mode 1/2 and standard deviation 0.19 that vanishes at both ends. Why a Beta: its support is the
masking rate's own [0, 1], a = b = 1 is the uniform masking rate, a and b move the centre and the width, and it is
the density samplers/beta.py already draws and evaluates (reused here). The logit-normal over the same level
(samplers/logitnormal.py, mean 0, std 1: standard deviation 0.21 in n) is the other bell the project offers.

Time of a level: t = process.t_of_sigma(n), the time whose masking rate is n under the configured schedule, so the
masking rates drawn follow q whatever the schedule (linear, cosine, polynomial, log-linear: each maps n to another
t). Levels beyond the schedule's range [n(0), n(1)] (truncation and squeezing keep it from 0 and 1 by their eps)
land on the nearest end of t.

Weights: none by default (the paper's reading assumed here): training then minimises E_{n ~ q}[c(n)] with c(n) the
masked cross-entropy per token at masking rate n, where the bound is int c(n) dn: a reweighting of the NELBO's per-t
terms by q. With `importance_weights` each example's loss is multiplied by u(t) / q_t(t) = (dt/dn) / q(n) (dt/dn the
derivative of t_of_sigma, by forward-mode differentiation), so the expected weighted loss is the uniform-t objective
for every (a, b); a level that lands on an end has dt/dn = 0 there and weight 0, and [n(0), n(1)] maps one to one
onto [0, 1], so nothing is lost. The weighted loss per unit of n is c(n) / q(n): with a, b > 1 and m = 0 its variance
is infinite (q vanishes at the ends, c does not), so use importance weights with m > 0 (the weights are then at most
1 / m times dt/dn, the loss times its weight at most c / m). Continuous time only.
"""

import jax
import jax.numpy as jnp

from config.registry import CONTINUOUS, Need
from samplers.base import SAMPLERS, Sampler
from samplers.beta import beta_fields, draw_unit, mixture_log_density, weighting_needs


@SAMPLERS.register
class BellSampler(Sampler):
    name = "bell"
    continuous = True
    inverts = True
    FIELDS = beta_fields(
        3.0,
        "Beta(a, b) of the noise level (the masking rate); 3, 3: a bell at 1/2",
        "Beta(a, b): mass toward low masking rates when a < b",
    )

    @classmethod
    def needs(cls, cfg):
        why = "it draws a continuous noise level, not a chain's steps"
        out = [*super().needs(cfg), Need(CONTINUOUS, why=why, allowed="logitnormal (a bell of the chain's levels)")]
        return out + weighting_needs(cfg)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        level = draw_unit(key, self.cfg.a, self.cfg.b, B, self.cfg.uniform_mix)
        if not self.cfg.importance_weights:
            return self.process.t_of_sigma(level), jnp.ones((B,), jnp.float32), {}
        t, dt = jax.jvp(self.process.t_of_sigma, (level,), (jnp.ones_like(level),))  # dt/dn
        logq = mixture_log_density(level, self.cfg.a, self.cfg.b, self.cfg.uniform_mix)
        w = jnp.abs(dt) * jnp.exp(-logq)
        return t, jnp.where(jnp.isfinite(w), w, 0.0).astype(jnp.float32), {}
