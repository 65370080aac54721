"""Loss weightings w(t), registered by name: a separate axis from the timestep sampler (method.md section 3).

A weighting is a class with `validate(config)` (raise ValueError naming the field) and `table(config, schedule)`
-> w [T] float64, computed once on the host; in the step the per-example loss is sampler_weight * w(t) * MSE.
Adding one: a module with a Weighting subclass and a line here.
"""
import jax.numpy as jnp
import numpy as np

from weightings.base import Weighting
from weightings.min_snr import MinSNR
from weightings.p2 import P2
from weightings.speed import SpeedWeighting


class NoWeighting(Weighting):
    name = "none"

    @classmethod
    def table(cls, config, schedule):
        return np.ones(schedule.num_timesteps)


WEIGHTINGS = {cls.name: cls for cls in (NoWeighting, P2, MinSNR, SpeedWeighting)}


def make_weighting(config, schedule):
    """fn(t [B] int32) -> w [B] float32."""
    name = config.weighting.name
    if name not in WEIGHTINGS:
        raise ValueError(f"config.weighting.name={name!r} is not a registered weighting; registered: "
                         f"{', '.join(sorted(WEIGHTINGS))}")
    table = jnp.asarray(WEIGHTINGS[name].table(config, schedule), jnp.float32)
    return lambda t: table[t]


__all__ = ["Weighting", "WEIGHTINGS", "make_weighting"]
