"""Denoising networks, registered by name (MODELS): the DDPM UNet ("unet"), DiT ("dit"), U-ViT ("uvit") and the token
transformer ("tokens"); every module of this package that registers one is imported (config.registry.import_parts)."""

from config.registry import import_parts
from models.base import DTYPES, MODELS, make_model
from models.dit import DiT
from models.unet import UNet, check_image_size
from models.uvit import UViT

import_parts(__name__, __path__)

__all__ = ["MODELS", "DTYPES", "make_model", "UNet", "check_image_size", "DiT", "UViT"]
