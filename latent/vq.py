"""diffusers' `VQModel` in Flax: the LDM's VQ-regularised first stage (CompVis/ldm-celebahq-256's `vqvae`, VQ-f4).

Source: diffusers src/diffusers/models/autoencoders/vq_model.py and vae.py (`VectorQuantizer`); the Encoder and
Decoder are latent/autoencoder_kl.py's (the same diffusers classes, `double_z=False`). Checked against diffusers on
stand-in weights by tests/test_autoencoders.py.

encode: encoder -> quant_conv (1x1, latent_channels -> vq_embed_dim): the pre-quantisation latent h. The LDM trains
its diffusion model on h and quantises only when decoding: decode(h) = decoder(post_quant_conv(quantize(h))), or
without `quantize` when force_not_quantize. The LDM's scale factor for VQ-f4 is 1.0 (its LDMPipeline decodes the
sampled latents as they are); diffusers' VQModel config carries `scaling_factor` 0.18215 only as a default copied
from the KL model, so VQConfig ignores it (latent/base.py takes an explicit override).

VectorQuantizer as diffusers builds it in VQModel: legacy=True, beta 0.25, no remap, sane_index_shape False. The
nearest codebook vector by Euclidean distance (torch.cdist + argmin, first index on ties); the output is
z + stop_gradient(z_q - z) (the straight-through estimator, same numbers as diffusers); the commitment loss
mean((sg(z_q) - z)^2) + beta * mean((z_q - sg(z))^2). Only norm_type "group" is ported (not MoVQ's "spatial").
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from latent.autoencoder_kl import Decoder, Encoder, check_block_types

BETA = 0.25


@dataclasses.dataclass(frozen=True)
class VQConfig:
    """The diffusers config.json fields that shape a VQModel (defaults: diffusers' own, but scaling_factor)."""

    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple = (64,)
    layers_per_block: int = 1
    latent_channels: int = 3
    norm_num_groups: int = 32
    sample_size: int = 32
    num_vq_embeddings: int = 256
    vq_embed_dim: int | None = None
    mid_block_add_attention: bool = True
    scaling_factor: float = 1.0

    @classmethod
    def from_diffusers(cls, config: dict, source: str = "config.json") -> "VQConfig":
        check_block_types(config, source)
        if config.get("norm_type", "group") != "group":
            raise ValueError(f"{source}: unsupported norm_type {config['norm_type']!r} (only 'group' is ported)")
        fields = {f.name for f in dataclasses.fields(cls)} - {"scaling_factor"}
        kw = {k: v for k, v in config.items() if k in fields}
        kw["block_out_channels"] = tuple(kw.get("block_out_channels", cls.block_out_channels))
        if isinstance(kw.get("sample_size"), list | tuple):
            kw["sample_size"] = kw["sample_size"][0]
        return cls(**kw)

    @property
    def embed_dim(self) -> int:
        return self.latent_channels if self.vq_embed_dim is None else self.vq_embed_dim

    @property
    def downsample_factor(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)


class VectorQuantizer(nn.Module):
    """z [N, h, w, D] -> (z_q [N, h, w, D], indices [N, h, w] int32, commitment loss scalar)."""

    num_embeddings: int
    dim: int
    beta: float = BETA

    @nn.compact
    def __call__(self, z):
        codebook = nn.Embed(self.num_embeddings, self.dim, name="embedding")
        e = codebook.embedding
        e2 = jnp.sum(e**2, axis=1)

        def nearest(rows):  # [M, D] -> [M]; |z|^2 is the same for every code and left out
            dot = jnp.dot(rows, e.T, precision=jax.lax.Precision.HIGHEST)
            return jnp.argmin(e2[None] - 2.0 * dot, axis=1).astype(jnp.int32)

        # one image at a time: the [h*w, num_embeddings] distances of a whole batch (64 images of 64x64 latents,
        # 8192 codes) would take 8.6 GB
        indices = jax.lax.map(nearest, z.reshape(z.shape[0], -1, self.dim)).reshape(z.shape[:-1])
        z_q = codebook(indices)
        sg = jax.lax.stop_gradient
        loss = jnp.mean((sg(z_q) - z) ** 2) + self.beta * jnp.mean((z_q - sg(z)) ** 2)
        z_q = z + sg(z_q - z)
        return z_q, indices, loss


class VQModel(nn.Module):
    """diffusers' VQModel. x: [N, H, W, in_channels] in [-1, 1]; h: [N, H/f, W/f, vq_embed_dim]."""

    config: VQConfig

    def setup(self):
        c = self.config
        self.encoder = Encoder(
            c.block_out_channels, c.layers_per_block, c.latent_channels, c.norm_num_groups, c.mid_block_add_attention
        )
        self.quant_conv = nn.Conv(c.embed_dim, (1, 1))
        self.quantize = VectorQuantizer(c.num_vq_embeddings, c.embed_dim)
        self.post_quant_conv = nn.Conv(c.latent_channels, (1, 1))
        self.decoder = Decoder(
            c.block_out_channels, c.layers_per_block, c.out_channels, c.norm_num_groups, c.mid_block_add_attention
        )

    def encode(self, x):
        """Images -> the pre-quantisation latent h (quant_conv's output)."""
        return self.quant_conv(self.encoder(x))

    def quantize_latents(self, h):
        """h -> (nearest codebook vectors, their indices [N, h, w], commitment loss)."""
        return self.quantize(h)

    def decode(self, h, force_not_quantize: bool = False):
        """h -> images [N, H, W, out_channels] (not clipped); h is quantised first unless force_not_quantize."""
        if not force_not_quantize:
            h = self.quantize(h)[0]
        return self.decoder(self.post_quant_conv(h))

    def __call__(self, x):
        return self.decode(self.encode(x))
