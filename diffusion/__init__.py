"""Diffusion processes (registered by name: ddpm, vp, flow, edm), their schedules, bound terms and samplers of
images."""

from diffusion import edm, flow, gaussian, sampling, vp
from diffusion.base import PROCESSES, make_process
from diffusion.ddpm import DDPM
from diffusion.schedules import SCHEDULES, Schedule, make_schedule

__all__ = [
    "PROCESSES",
    "make_process",
    "DDPM",
    "edm",
    "flow",
    "vp",
    "Schedule",
    "make_schedule",
    "SCHEDULES",
    "gaussian",
    "sampling",
]
