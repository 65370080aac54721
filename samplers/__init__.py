"""Timestep samplers, registered by name. Adding one: a module with a Sampler subclass and a line here."""
from samplers.base import Sampler, StepContext, TableSampler
from samplers.adaptive import AdaptiveSampler
from samplers.antithetic import AntitheticSampler
from samplers.grad_variance import GradVarianceSampler
from samplers.logitnormal import LogitNormalSampler
from samplers.lognormal import LogNormalSampler
from samplers.loss_second_moment import LossSecondMomentSampler
from samplers.speed import SpeedSampler
from samplers.uniform import UniformSampler

SAMPLERS = {cls.name: cls for cls in (UniformSampler, AntitheticSampler, SpeedSampler, LogNormalSampler,
                                      LogitNormalSampler, LossSecondMomentSampler, GradVarianceSampler,
                                      AdaptiveSampler)}


def make_sampler(config, schedule) -> Sampler:
    name = config.sampler.name
    if name not in SAMPLERS:
        raise ValueError(f"config.sampler.name={name!r} is not a registered sampler; registered: {', '.join(sorted(SAMPLERS))}")
    return SAMPLERS[name](config, schedule)


__all__ = ["Sampler", "StepContext", "TableSampler", "SAMPLERS", "make_sampler"]
