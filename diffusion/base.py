"""The registry of diffusion processes (config.diffusion, flat layout: config.diffusion.name and the named
process's own fields). A process object gives the train step x_t, the training target and the per-example loss,
the timestep samplers its time domain, and evaluation its bound terms and samplers (ddpm.py is the reference)."""

from core.registry import FLAT, Registry

PROCESSES = Registry("diffusion", FLAT)


def make_process(diffusion_cfg):
    """The process config.diffusion names, built from its own fields."""
    return PROCESSES[diffusion_cfg.name].from_config(diffusion_cfg)
