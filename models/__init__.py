"""Denoising networks, registered by name (MODELS): the DDPM UNet ("unet")."""

from models import unet
from models.base import DTYPES, MODELS, make_model
from models.unet import UNet, check_image_size

__all__ = ["MODELS", "DTYPES", "make_model", "UNet", "check_image_size", "unet"]
