"""Diffusion processes (registered by name: ddpm, vp, flow, edm on images; masked, and its autoregressive baseline,
on tokens), their schedules, bound terms and samplers."""

from diffusion import autoregressive, edm, flow, gaussian, masked, sampling, vp
from diffusion.base import PROCESSES, make_process
from diffusion.ddpm import DDPM
from diffusion.schedules import SCHEDULES, Schedule, make_schedule

__all__ = [
    "PROCESSES",
    "make_process",
    "DDPM",
    "edm",
    "flow",
    "masked",
    "autoregressive",
    "vp",
    "Schedule",
    "make_schedule",
    "SCHEDULES",
    "gaussian",
    "sampling",
]
