"""Timestep samplers, registered by name (SAMPLERS). Adding one: a module of this package with a Sampler subclass
registered with `@SAMPLERS.register`, declaring its own config fields (docs/extending.md#a-sampler); the package
imports it (config.registry.import_parts)."""

from config.registry import import_parts
from samplers.base import SAMPLERS, Sampler, StepContext, TableSampler

import_parts(__name__, __path__)


def make_sampler(sampler_cfg, process, batch_size: int) -> Sampler:
    """The sampler config.sampler names, from its own sub-config, the diffusion process and the global batch size."""
    cls = SAMPLERS[sampler_cfg.name]
    return cls(SAMPLERS.own_config(sampler_cfg), process, batch_size)


__all__ = ["Sampler", "StepContext", "TableSampler", "SAMPLERS", "make_sampler"]
