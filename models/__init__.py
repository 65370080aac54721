"""Denoising networks, registered by name (MODELS): the DDPM UNet ("unet"), DiT ("dit"), U-ViT ("uvit") and the token
transformer ("tokens")."""

from models import dit, tokens, unet, uvit
from models.base import DTYPES, MODELS, make_model
from models.dit import DiT
from models.unet import UNet, check_image_size
from models.uvit import UViT

__all__ = ["MODELS", "DTYPES", "make_model", "UNet", "check_image_size", "unet", "DiT", "UViT", "dit", "uvit", "tokens"]
