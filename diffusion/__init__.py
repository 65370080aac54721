"""Gaussian diffusion: schedules, forward process, posterior, bound terms and samplers of images."""
from diffusion.schedules import Schedule, make_schedule, SCHEDULES
from diffusion import gaussian, sampling

__all__ = ["Schedule", "make_schedule", "SCHEDULES", "gaussian", "sampling"]
