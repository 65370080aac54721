"""A first-stage autoencoder for latent diffusion, built from a diffusers weights path: `make_autoencoder(path)`.

    ae = make_autoencoder("/data/sd-vae-ft-ema")        # a diffusers AutoencoderKL or VQModel directory
    z = ae.encode(images, key)                           # [N, H, W, 3] in [-1, 1] -> [N, H/f, W/f, C], scaled
    images = ae.decode(z)                                # -> [N, H, W, 3] in [-1, 1]

Latents are what the diffusion model sees: the KL model's posterior sample (the mean when no key is given), or the
VQ model's pre-quantisation h, minus `shift_factor` (0 unless the config has one) times `scaling_factor`. decode
undoes that, quantises (VQ), decodes and clips to [-1, 1] as diffusers' pipelines do before turning images to bytes.
scaling_factor: the config's (Stable Diffusion's VAE: 0.18215, as DiT / U-ViT / SiT use) for KL; 1.0 for VQ (the
LDM's choice for VQ-f4: see latent/vq.py); `make_autoencoder(path, scaling_factor=s)` overrides either.

`encode` / `decode` run jitted programs compiled once per input shape; `encode_fn(params, x, key)` and
`decode_fn(params, z)` are the same pure functions, for use inside another jitted function (a train step that
encodes on the fly) with the params passed in as an argument rather than baked in as constants.
"""

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from latent.autoencoder_kl import AutoencoderKL
from latent.weights import load_diffusers, model_from_config

KINDS = {AutoencoderKL: "kl"}  # every other module (VQModel) is "vq"


def _encode(model, kind, scale, shift, params, x, key=None):
    v = {"params": params}
    if kind == "vq":
        z = model.apply(v, x, method="encode")
    elif key is None:
        z = model.apply(v, x, method="encode")[0]
    else:
        z = model.apply(v, x, key, method="sample")
    return (z - shift) * scale


def _decode(model, scale, shift, params, z):
    return jnp.clip(model.apply({"params": params}, z / scale + shift, method="decode"), -1.0, 1.0)


@dataclasses.dataclass(frozen=True, eq=False)
class Autoencoder:
    """A loaded first stage. kind: "kl" or "vq"; the latents have `latent_channels` channels and 1/f the size."""

    kind: str
    scaling_factor: float
    shift_factor: float
    downsample_factor: int
    image_channels: int
    latent_channels: int
    config: dict  # config.json as read
    model: Any  # the Flax module (latent.autoencoder_kl.AutoencoderKL or latent.vq.VQModel)
    params: Any
    encode_fn: Callable  # jitted (params, images [N, H, W, C], key or None) -> latents
    decode_fn: Callable  # jitted (params, latents) -> images in [-1, 1]

    def encode(self, x, key=None):
        """Images [N, H, W, C] in [-1, 1] -> scaled latents [N, H/f, W/f, latent_channels]. KL: a posterior sample
        with `key`, else its mean; VQ: the pre-quantisation latent (key unused)."""
        return self.encode_fn(self.params, x, key)

    def decode(self, z):
        """Scaled latents [N, h, w, latent_channels] -> images [N, h*f, w*f, C] clipped to [-1, 1]."""
        return self.decode_fn(self.params, z)

    def latent_shape(self, image_shape) -> tuple:
        """(..., H, W, C) of images -> (..., H/f, W/f, latent_channels) of their latents."""
        *lead, h, w, c = image_shape
        f = self.downsample_factor
        if c != self.image_channels:
            raise ValueError(f"images have {c} channels; this autoencoder takes {self.image_channels}")
        if h % f or w % f:
            raise ValueError(f"image size {h}x{w} is not a multiple of the autoencoder's downsampling factor {f}")
        return (*lead, h // f, w // f, self.latent_channels)


def make_autoencoder(path: str, scaling_factor: float | None = None) -> Autoencoder:
    """The autoencoder whose diffusers config.json and weights are at `path` (see latent/weights.py); nothing is
    downloaded. `scaling_factor` overrides the default described in this module's docstring."""
    config, params = load_diffusers(path)
    model = model_from_config(config)
    c = model.config
    kind = KINDS.get(type(model), "vq")
    scale = float(c.scaling_factor if scaling_factor is None else scaling_factor)
    shift = float(getattr(c, "shift_factor", None) or 0.0)
    return Autoencoder(
        kind=kind,
        scaling_factor=scale,
        shift_factor=shift,
        downsample_factor=c.downsample_factor,
        image_channels=c.in_channels,
        latent_channels=c.latent_channels if kind == "kl" else c.embed_dim,
        config=config,
        model=model,
        params=params,
        encode_fn=jax.jit(functools.partial(_encode, model, kind, scale, shift)),
        decode_fn=jax.jit(functools.partial(_decode, model, scale, shift)),
    )
