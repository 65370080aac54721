"""Diffusion processes (registered by name: ddpm, vp, flow, edm on images; masked, and its autoregressive baseline,
on tokens; every module of this package that registers one is imported: config.registry.import_parts), their
schedules, bound terms and samplers."""

from config.registry import import_parts
from diffusion import gaussian, sampling
from diffusion.base import PROCESSES, make_process
from diffusion.ddpm import DDPM
from diffusion.schedules import SCHEDULES, Schedule, make_schedule

import_parts(__name__, __path__)

__all__ = [
    "PROCESSES",
    "make_process",
    "DDPM",
    "Schedule",
    "make_schedule",
    "SCHEDULES",
    "gaussian",
    "sampling",
]
