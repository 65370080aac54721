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

from config.fields import FieldError, Int, Ints, Num
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


def class_embedding(num_classes: int, dim: int, y, dtype, name: str = "class_embed"):
    """The label embedding [B, dim] added to the time embedding (improved-diffusion's label_emb), 0 when the model
    is unconditional. Call inside a compact module; y [B] int in 0..num_classes (num_classes: the null class)."""
    if not num_classes:
        if y is not None:
            raise ValueError("labels passed to an unconditional model (config.model.class_cond=False)")
        return 0.0
    if y is None:
        raise ValueError("a class-conditional model needs labels y (pass the null class for unconditional)")
    return nn.Embed(num_classes + 1, dim, dtype=dtype, name=name)(y)


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
    head_channels: int = -1  # channels per head (LDM's num_head_channels); -1: one head of all C (DDPM)

    @nn.compact
    def __call__(self, x):
        B, H, W, C = x.shape
        h = nn.GroupNorm(self.groups, dtype=self.dtype)(x).reshape(B, H * W, C)
        q, k, v = (nn.Dense(C, dtype=self.dtype, name=n)(h) for n in ("q", "k", "v"))
        if self.head_channels == -1 or self.head_channels == C:
            # logits and softmax in float32 whatever the compute dtype (bfloat16 logits lose the small differences)
            logits = jnp.einsum("bqc,bkc->bqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(C)
            w = nn.softmax(logits, axis=-1).astype(self.dtype)
            h = jnp.einsum("bqk,bkc->bqc", w, v)
        else:
            d = self.head_channels
            q, k, v = (a.reshape(B, H * W, C // d, d) for a in (q, k, v))
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(d)
            w = nn.softmax(logits, axis=-1).astype(self.dtype)
            h = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, H * W, C)
        h = nn.Dense(C, kernel_init=nn.initializers.zeros, dtype=self.dtype, name="proj")(h)
        return x + h.reshape(B, H, W, C)


class UNet(nn.Module):
    """eps/x0/v-prediction network. x: [B, H, W, C] in [-1, 1]; t: [B] timesteps; y: [B] int labels or None.
    Returns [B, H, W, out_channels] float32."""

    ch: int = 128
    ch_mult: Sequence[int] = (1, 2, 2, 2)
    num_res_blocks: int = 2
    attn_resolutions: Sequence[int] = (16,)
    dropout: float = 0.1
    num_groups: int = 32
    num_head_channels: int = -1  # attention: channels per head (-1: one head)
    num_classes: int = 0  # > 0: class-conditional, with num_classes + 1 embeddings (the last: the null class)
    out_channels: int | None = None  # None: x's channel count
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, t, y=None, train: bool = False):
        out_channels = self.out_channels or x.shape[-1]
        kw = dict(groups=self.num_groups, dtype=self.dtype)
        akw = dict(kw, head_channels=self.num_head_channels)
        temb = timestep_embedding(t, self.ch)
        temb = nn.Dense(4 * self.ch, dtype=self.dtype)(temb)
        temb = nn.Dense(4 * self.ch, dtype=self.dtype)(nn.swish(temb))
        temb = temb + class_embedding(self.num_classes, 4 * self.ch, y, self.dtype)

        h = nn.Conv(self.ch, (3, 3), dtype=self.dtype)(x.astype(self.dtype))
        skips = [h]
        for level, mult in enumerate(self.ch_mult):
            for _ in range(self.num_res_blocks):
                h = ResBlock(self.ch * mult, dropout=self.dropout, **kw)(h, temb, train)
                if h.shape[1] in self.attn_resolutions:
                    h = AttnBlock(**akw)(h)
                skips.append(h)
            if level != len(self.ch_mult) - 1:
                h = nn.Conv(h.shape[-1], (3, 3), strides=(2, 2), dtype=self.dtype)(h)
                skips.append(h)

        h = ResBlock(h.shape[-1], dropout=self.dropout, **kw)(h, temb, train)
        h = AttnBlock(**akw)(h)
        h = ResBlock(h.shape[-1], dropout=self.dropout, **kw)(h, temb, train)

        for level, mult in reversed(list(enumerate(self.ch_mult))):
            for _ in range(self.num_res_blocks + 1):
                h = ResBlock(self.ch * mult, dropout=self.dropout, **kw)(
                    jnp.concatenate([h, skips.pop()], -1), temb, train
                )
                if h.shape[1] in self.attn_resolutions:
                    h = AttnBlock(**akw)(h)
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
    """The registered part: the UNet's config fields (defaults: the digits' 280k-parameter UNet, sized for a laptop
    CPU: docs/benchmarks/speed.md#speed-of-the-step) and its construction."""

    name = "unet"
    FIELDS = dict(
        ch=Int(16, 1),
        ch_mult=Ints((1, 2, 2), 1),
        num_res_blocks=Int(1, 1),
        attn_resolutions=Ints((4,), 1, allow_empty=True),
        dropout=Num(0.1, 0.0, 1.0, hi_open=True),
        num_groups=Int(4, 1),
        num_head_channels=Int(-1, 1, extra=(-1,)),  # attention head width (LDM: 32); -1: one head (DDPM)
    )

    @classmethod
    def check(cls, cfg, ctx):
        check_image_size(ctx["image_size"], cfg.ch_mult, cfg.attn_resolutions)
        widths = [cfg.ch * m for m in cfg.ch_mult]
        if any(w % cfg.num_groups for w in widths):
            raise FieldError("num_groups", cfg.num_groups, f"must divide every level's channel count {widths}")
        if cfg.num_head_channels != -1 and any(w % cfg.num_head_channels for w in widths):
            raise FieldError("num_head_channels", cfg.num_head_channels, f"must divide every level's width {widths}")

    @classmethod
    def build(cls, cfg, *, num_classes: int = 0, out_channels: int | None = None) -> UNet:
        return UNet(
            num_classes=num_classes,
            out_channels=out_channels,
            ch=cfg.ch,
            ch_mult=tuple(cfg.ch_mult),
            num_res_blocks=cfg.num_res_blocks,
            attn_resolutions=tuple(cfg.attn_resolutions),
            dropout=cfg.dropout,
            num_groups=cfg.num_groups,
            num_head_channels=cfg.num_head_channels,
            dtype=jnp.dtype(cfg.dtype),
        )
