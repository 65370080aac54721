"""Diffusion processes (registered by name: ddpm), their schedules, bound terms and samplers of images."""

from diffusion import gaussian, sampling
from diffusion.base import PROCESSES, make_process
from diffusion.ddpm import DDPM
from diffusion.schedules import SCHEDULES, Schedule, make_schedule

__all__ = ["PROCESSES", "make_process", "DDPM", "Schedule", "make_schedule", "SCHEDULES", "gaussian", "sampling"]
