"""The timestep-sampler contract.

A sampler turns a sampler state (a pytree carried in the train state) into timesteps and per-example loss weights,
and updates that state from what the train step computed. Every method is traced inside the one jitted train step,
so it must be pure and shape-stable; branching on traced values uses lax.cond.

    state = sampler.init(key, x0)                     # x0: one global batch of images, for shapes only
    t, weights, aux = sampler.sample(state, key, x0)  # t: [B] int32 in 0..T-1, weights: [B] float32
    state, metrics = sampler.update(state, ctx)       # ctx: StepContext of this step

`weights` multiply the per-example loss (importance weights; 1 for samplers that deliberately re-weight the
objective). They are separate from the loss weighting (weightings/), which depends on t only.
"""
import dataclasses
from typing import Any, Callable, Dict, Tuple

import jax
import jax.numpy as jnp

from diffusion.schedules import Schedule


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What one train step hands to `Sampler.update` (all arrays are global, sharded over the data axis).

    terms_fn(params, x0, ts, noise) -> [B, K] computes bound terms (bits/dim) of the diffusion model with `params`
    for the images x0 [B, ...] at timesteps ts [K], with noise [K, B, ...]; it runs the network in train mode with a
    fixed dropout key when the config asks for dropout during probes.
    """

    step: jnp.ndarray
    key: jnp.ndarray
    x0: jnp.ndarray
    t: jnp.ndarray
    aux: Dict[str, jnp.ndarray]
    losses: jnp.ndarray
    params_before: Any
    params_after: Any
    terms_fn: Callable[..., jnp.ndarray]


class Sampler:
    """Base class: stateless uniform behaviour for update; subclasses override what they need."""

    name = "base"

    def __init__(self, config, schedule: Schedule):
        self.config = config
        self.schedule = schedule
        self.T = schedule.num_timesteps

    @classmethod
    def validate(cls, config) -> None:
        """Raise ValueError naming the field when the sampler's config fields are out of range."""

    def init(self, key, x0) -> Any:
        return {}

    def sample(self, state, key, x0) -> Tuple[jnp.ndarray, jnp.ndarray, Dict[str, jnp.ndarray]]:
        raise NotImplementedError

    def update(self, state, ctx: StepContext) -> Tuple[Any, Dict[str, jnp.ndarray]]:
        return state, {}

    def check_finite(self, state, aux) -> jnp.ndarray:
        """A scalar bool: whether this step's sampler outputs and state are finite."""
        leaves = [x for x in jax.tree.leaves((state, aux)) if jnp.issubdtype(x.dtype, jnp.floating)]
        if not leaves:
            return jnp.array(True)
        return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
