"""Timestep samplers, registered by name (SAMPLERS). Adding one: a module with a Sampler subclass registered with
`@SAMPLERS.register`, declaring its own config fields (docs/extending.md#a-sampler); import it here to ship it."""

from samplers import (
    adaptive,
    adaptive_noise,
    antithetic,
    beta,
    beta_search,
    grad_variance,
    infonoise,
    logitnormal,
    lognormal,
    loss_second_moment,
    speed,
    uniform,
)
from samplers.base import SAMPLERS, Sampler, StepContext, TableSampler


def make_sampler(sampler_cfg, process, batch_size: int) -> Sampler:
    """The sampler config.sampler names, from its own sub-config, the diffusion process and the global batch size."""
    cls = SAMPLERS[sampler_cfg.name]
    return cls(SAMPLERS.own_config(sampler_cfg), process, batch_size)


__all__ = [
    "Sampler",
    "StepContext",
    "TableSampler",
    "SAMPLERS",
    "make_sampler",
    "adaptive",
    "adaptive_noise",
    "antithetic",
    "beta",
    "beta_search",
    "grad_variance",
    "infonoise",
    "logitnormal",
    "lognormal",
    "loss_second_moment",
    "speed",
    "uniform",
]
