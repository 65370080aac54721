"""Loss weightings w(t), registered by name: a separate axis from the timestep sampler.

A weighting is `make(config, schedule) -> fn(t [B] int32) -> w [B] float32`; the per-example loss is
sampler_weight * w(t) * mse.
"""
import jax.numpy as jnp


def none(config, schedule):
    return lambda t: jnp.ones(t.shape, jnp.float32)


WEIGHTINGS = {"none": none}


def make_weighting(config, schedule):
    name = config.weighting.name
    if name not in WEIGHTINGS:
        raise ValueError(f"config.weighting.name={name!r} is not a registered weighting; registered: {', '.join(sorted(WEIGHTINGS))}")
    return WEIGHTINGS[name](config, schedule)
