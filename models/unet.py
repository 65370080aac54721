"""The DDPM UNet (Ho et al. 2020) in Flax linen.

Structure of the DDPM / improved-diffusion network: sinusoidal time embedding -> MLP; per resolution
`num_res_blocks` residual blocks (with self-attention at `attn_resolutions`), downsampling by strided conv; a middle
block (res, attention, res); the mirrored upsampling path with skip connections (num_res_blocks + 1 blocks per level);
GroupNorm, swish, 3x3 conv out (zero-initialised). With ch=128, ch_mult=(1, 2, 2, 2), 2 res blocks, attention at 16
and 32x32x3 input it has the 35.7M parameters of the DDPM CIFAR-10 model.
"""

import math
from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from core.fields import FieldError, Int, Ints, Num
from models.base import MODELS


def check_image_size(image_size: int, ch_mult: Sequence[int], attn_resolutions: Sequence[int]):
    """Raise FieldError naming the UNet field when the UNet cannot take this image size."""
    factor = 2 ** (len(ch_mult) - 1)
    if image_size < 1 or image_size % factor:
        raise FieldError(
            "ch_mult",
            tuple(ch_mult),
            f"{len(ch_mult) - 1} downsamplings need an image size that is a positive multiple of "
            f"{factor}; config.data.image_size is {image_size}",
        )
    resolutions = {image_size // 2**i for i in range(len(ch_mult))}
    bad = [r for r in attn_resolutions if r not in resolutions]
    if bad:
        raise FieldError(
            "attn_resolutions",
            tuple(attn_resolutions),
            f"{bad} is not a resolution of this UNet; allowed: {sorted(resolutions, reverse=True)}",
        )


def timestep_embedding(t, dim: int, max_period: float = 10000.0):
    """Sinusoidal embedding [B, dim] of integer timesteps t [B] (DDPM / tensor2tensor form)."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / (half - 1))
    args = t.astype(jnp.float32)[:, None] * freqs[None]
    emb = jnp.concatenate([jnp.sin(args), jnp.cos(args)], axis=-1)
    return jnp.pad(emb, ((0, 0), (0, dim % 2)))


class ResBlock(nn.Module):
    out_ch: int
    groups: int
    dropout: float
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, temb, train: bool):
        h = nn.swish(nn.GroupNorm(self.groups, dtype=self.dtype)(x))
        h = nn.Conv(self.out_ch, (3, 3), dtype=self.dtype)(h)
        h = h + nn.Dense(self.out_ch, dtype=self.dtype)(nn.swish(temb))[:, None, None, :]
        h = nn.swish(nn.GroupNorm(self.groups, dtype=self.dtype)(h))
        h = nn.Dropout(self.dropout, deterministic=not train)(h)
        h = nn.Conv(self.out_ch, (3, 3), kernel_init=nn.initializers.zeros, dtype=self.dtype)(h)
        if x.shape[-1] != self.out_ch:
            x = nn.Conv(self.out_ch, (1, 1), dtype=self.dtype)(x)
        return x + h


class AttnBlock(nn.Module):
    groups: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        B, H, W, C = x.shape
        h = nn.GroupNorm(self.groups, dtype=self.dtype)(x).reshape(B, H * W, C)
        q, k, v = (nn.Dense(C, dtype=self.dtype, name=n)(h) for n in ("q", "k", "v"))
        # logits and softmax in float32 whatever the compute dtype (bfloat16 logits lose the small differences)
        logits = jnp.einsum("bqc,bkc->bqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(C)
        w = nn.softmax(logits, axis=-1).astype(self.dtype)
        h = jnp.einsum("bqk,bkc->bqc", w, v)
        h = nn.Dense(C, kernel_init=nn.initializers.zeros, dtype=self.dtype, name="proj")(h)
        return x + h.reshape(B, H, W, C)


class UNet(nn.Module):
    """eps/x0/v-prediction network. x: [B, H, W, C] in [-1, 1]; t: [B] int. Returns [B, H, W, C] float32."""

    ch: int = 128
    ch_mult: Sequence[int] = (1, 2, 2, 2)
    num_res_blocks: int = 2
    attn_resolutions: Sequence[int] = (16,)
    dropout: float = 0.1
    num_groups: int = 32
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, t, train: bool = False):
        out_channels = x.shape[-1]
        kw = dict(groups=self.num_groups, dtype=self.dtype)
        temb = timestep_embedding(t, self.ch)
        temb = nn.Dense(4 * self.ch, dtype=self.dtype)(temb)
        temb = nn.Dense(4 * self.ch, dtype=self.dtype)(nn.swish(temb))

        h = nn.Conv(self.ch, (3, 3), dtype=self.dtype)(x.astype(self.dtype))
        skips = [h]
        for level, mult in enumerate(self.ch_mult):
            for _ in range(self.num_res_blocks):
                h = ResBlock(self.ch * mult, dropout=self.dropout, **kw)(h, temb, train)
                if h.shape[1] in self.attn_resolutions:
                    h = AttnBlock(**kw)(h)
                skips.append(h)
            if level != len(self.ch_mult) - 1:
                h = nn.Conv(h.shape[-1], (3, 3), strides=(2, 2), dtype=self.dtype)(h)
                skips.append(h)

        h = ResBlock(h.shape[-1], dropout=self.dropout, **kw)(h, temb, train)
        h = AttnBlock(**kw)(h)
        h = ResBlock(h.shape[-1], dropout=self.dropout, **kw)(h, temb, train)

        for level, mult in reversed(list(enumerate(self.ch_mult))):
            for _ in range(self.num_res_blocks + 1):
                h = ResBlock(self.ch * mult, dropout=self.dropout, **kw)(
                    jnp.concatenate([h, skips.pop()], -1), temb, train
                )
                if h.shape[1] in self.attn_resolutions:
                    h = AttnBlock(**kw)(h)
            if level != 0:
                B, H, W, C = h.shape
                h = jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2)  # nearest-neighbour upsampling
                h = nn.Conv(C, (3, 3), dtype=self.dtype)(h)
        assert not skips
        h = nn.swish(nn.GroupNorm(self.num_groups, dtype=self.dtype)(h))
        h = nn.Conv(out_channels, (3, 3), kernel_init=nn.initializers.zeros, dtype=self.dtype)(h)
        return h.astype(jnp.float32)


@MODELS.register
class UNetModel:
    """The registered part: the UNet's config fields (defaults: the digits' 280k-parameter UNet, sized so that a
    step at batch 128 runs at >= 10 steps/s on 2 CPU cores, README) and its construction."""

    name = "unet"
    FIELDS = dict(
        ch=Int(16, 1),
        ch_mult=Ints((1, 2, 2), 1),
        num_res_blocks=Int(1, 1),
        attn_resolutions=Ints((4,), 1, allow_empty=True),
        dropout=Num(0.1, 0.0, 1.0, hi_open=True),
        num_groups=Int(4, 1),
    )

    @classmethod
    def check(cls, cfg, ctx):
        check_image_size(ctx["image_size"], cfg.ch_mult, cfg.attn_resolutions)
        widths = [cfg.ch * m for m in cfg.ch_mult]
        if any(w % cfg.num_groups for w in widths):
            raise FieldError("num_groups", cfg.num_groups, f"must divide every level's channel count {widths}")

    @classmethod
    def build(cls, cfg) -> UNet:
        return UNet(
            ch=cfg.ch,
            ch_mult=tuple(cfg.ch_mult),
            num_res_blocks=cfg.num_res_blocks,
            attn_resolutions=tuple(cfg.attn_resolutions),
            dropout=cfg.dropout,
            num_groups=cfg.num_groups,
            dtype=jnp.dtype(cfg.dtype),
        )
