"""Loss weightings w(t), registered by name (WEIGHTINGS): a separate axis from the timestep sampler (method.md
section 3).

A weighting is a Weighting subclass with its own config fields and `table(cfg, process)` -> w [T] float64,
computed once on the host; in the step the per-example loss is sampler_weight * w(t) * MSE. Adding one: a module
registered with `@WEIGHTINGS.register` (README: adding a part); import it here to ship it.
"""

import jax.numpy as jnp

from weightings import min_snr, none, p2, speed
from weightings.base import WEIGHTINGS, Weighting


def make_weighting(weighting_cfg, process):
    """fn(t [B] int32) -> w [B] float32 for the weighting config.weighting names."""
    cls = WEIGHTINGS[weighting_cfg.name]
    if getattr(process, "learned_schedule", False):  # validation allows only "none" with a learned schedule
        return lambda t: jnp.ones(jnp.shape(t), jnp.float32)
    if not process.discrete:
        own = WEIGHTINGS.own_config(weighting_cfg)
        return lambda t: cls.of_path(own, *process.path_coefs(t)).astype(jnp.float32)
    table = jnp.asarray(cls.table(WEIGHTINGS.own_config(weighting_cfg), process), jnp.float32)
    return lambda t: table[t]


__all__ = ["Weighting", "WEIGHTINGS", "make_weighting", "min_snr", "none", "p2", "speed"]
