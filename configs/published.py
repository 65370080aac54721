"""What the configs of published runs share: a variant argument "METHOD" mapped to (sampler, weighting), and the
latents a run reads (config.data.name = latents; the folder written by `python -m data.encode_latents`)."""

from config.schema import default_config
from config.variants import Slot, one_of, parse_variant

# a method of the papers' tables: (config.sampler.name, config.weighting.name)
METHODS = {
    "uniform": ("uniform", "none"),
    "p2": ("uniform", "p2"),
    "min_snr": ("uniform", "min_snr"),
    "lognormal": ("lognormal", "none"),
    "speed": ("speed", "speed"),
    "adaptive": ("adaptive", "none"),
    "adaptive+min_snr": ("adaptive", "min_snr"),
}


def parse_name(config_file: str, variant: str, allowed, default: str) -> str:
    """The variant named after the config file's colon, one of `allowed` (default when empty)."""
    (name,) = parse_variant(config_file, variant, [Slot(allowed, default)], one_of(allowed, default))
    return name


def parse_method(config_file: str, variant: str, allowed, default: str) -> tuple:
    return METHODS[parse_name(config_file, variant, allowed, default)]


def latent_config(model: str, method: tuple, latent_shape, path: str = "latents"):
    """A config on pre-encoded latents of shape (h, w, c) with `model` and (sampler, weighting) = method."""
    sampler, weighting = method
    c = default_config(data="latents", model=model, diffusion="ddpm", sampler=sampler, weighting=weighting)
    c.data.path = path
    c.data.image_size, c.data.channels = latent_shape[0], latent_shape[2]
    return c
