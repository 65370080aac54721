"""Timestep samplers, registered by name. Adding one: a module with a Sampler subclass and a line here."""
from samplers.base import Sampler, StepContext
from samplers.adaptive import AdaptiveSampler
from samplers.uniform import UniformSampler

SAMPLERS = {cls.name: cls for cls in (UniformSampler, AdaptiveSampler)}


def make_sampler(config, schedule) -> Sampler:
    name = config.sampler.name
    if name not in SAMPLERS:
        raise ValueError(f"config.sampler.name={name!r} is not a registered sampler; registered: {', '.join(sorted(SAMPLERS))}")
    return SAMPLERS[name](config, schedule)


__all__ = ["Sampler", "StepContext", "SAMPLERS", "make_sampler"]
