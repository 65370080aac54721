"""diffusers' `AutoencoderKL` in Flax: Stable Diffusion's f8 VAE (sd-vae-ft-ema / sd-vae-ft-mse) that DiT, U-ViT and
SiT train in, and the Encoder / Decoder that `latent/vq.py` shares.

Source: diffusers (github.com/huggingface/diffusers) src/diffusers/models/autoencoders/autoencoder_kl.py and vae.py
(`Encoder`, `Decoder`, `DiagonalGaussianDistribution`), models/unets/unet_2d_blocks.py (`DownEncoderBlock2D`,
`UpDecoderBlock2D`, `UNetMidBlock2D`), models/resnet.py (`ResnetBlock2D`), models/attention_processor.py (`Attention`
as the mid block builds it), models/downsampling.py / upsampling.py. Checked against diffusers itself on stand-in
weights (tests/test_autoencoders.py, fixtures from tests/fixtures/make_autoencoder_fixture.py).

Layout NHWC (diffusers: NCHW). Every norm is GroupNorm(norm_num_groups, eps 1e-6); activations SiLU; no dropout
(inference). Encoder: conv_in 3x3 -> per level `layers_per_block` ResnetBlocks (+ a stride-2 3x3 conv after a
(0, 1, 0, 1) zero pad, all levels but the last) -> mid block (resnet, single-head self-attention with a residual,
resnet) -> norm, SiLU, conv_out 3x3 to 2 * latent_channels (mean and log-variance; `double_z`). Decoder: the mirror,
with `layers_per_block + 1` resnets a level and nearest x2 upsampling then a 3x3 conv. quant_conv / post_quant_conv
are 1x1 convs (absent when use_quant_conv / use_post_quant_conv are false). The posterior's log-variance is clamped
to [-30, 20] as diffusers does.

Parameter names follow diffusers' state-dict keys, with `.N` written `_N` (`encoder.down_blocks.0.resnets.1.conv1.
weight` is params["encoder"]["down_blocks_0"]["resnets_1"]["conv1"]["kernel"]): latent/weights.py maps them.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

EPS = 1e-6
LOGVAR_RANGE = (-30.0, 20.0)
DOWN_BLOCK = "DownEncoderBlock2D"
UP_BLOCK = "UpDecoderBlock2D"


def _group_norm(groups, name):
    # the two-pass variance: E[x^2] - E[x]^2 loses digits on activations with a large mean
    return nn.GroupNorm(num_groups=groups, epsilon=EPS, use_fast_variance=False, name=name)


def _conv(features, kernel, name, strides=1, padding=None):
    pad = kernel // 2 if padding is None else padding
    return nn.Conv(features, (kernel, kernel), (strides, strides), padding=((pad, pad), (pad, pad)), name=name)


class ResnetBlock(nn.Module):
    """diffusers' ResnetBlock2D without a time embedding: x + conv2(silu(norm2(conv1(silu(norm1(x))))))."""

    features: int
    groups: int

    @nn.compact
    def __call__(self, x):
        h = _conv(self.features, 3, "conv1")(nn.silu(_group_norm(self.groups, "norm1")(x)))
        h = _conv(self.features, 3, "conv2")(nn.silu(_group_norm(self.groups, "norm2")(h)))
        if x.shape[-1] != self.features:
            x = _conv(self.features, 1, "conv_shortcut")(x)
        return x + h


class Attention(nn.Module):
    """The mid block's self-attention (diffusers' Attention with group norm, one head of dim C, residual)."""

    groups: int

    @nn.compact
    def __call__(self, x):
        n, h, w, c = x.shape
        y = _group_norm(self.groups, "group_norm")(x).reshape(n, h * w, c)
        q, k, v = (nn.Dense(c, name=name)(y) for name in ("to_q", "to_k", "to_v"))
        logits = jnp.einsum("nqc,nkc->nqk", q, k) / jnp.sqrt(jnp.asarray(c, q.dtype))
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)  # upcast_softmax=True
        y = nn.Dense(c, name="to_out_0")(jnp.einsum("nqk,nkc->nqc", weights, v))
        return x + y.reshape(n, h, w, c)


class MidBlock(nn.Module):
    """UNetMidBlock2D with one layer: resnet, (attention,) resnet."""

    groups: int
    add_attention: bool = True

    @nn.compact
    def __call__(self, x):
        c = x.shape[-1]
        x = ResnetBlock(c, self.groups, name="resnets_0")(x)
        if self.add_attention:
            x = Attention(self.groups, name="attentions_0")(x)
        return ResnetBlock(c, self.groups, name="resnets_1")(x)


class Encoder(nn.Module):
    """Images [N, H, W, in_channels] -> [N, H/f, W/f, out_channels], f = 2 ** (len(block_out_channels) - 1)."""

    block_out_channels: tuple
    layers_per_block: int
    out_channels: int
    groups: int
    mid_block_add_attention: bool = True

    @nn.compact
    def __call__(self, x):
        x = _conv(self.block_out_channels[0], 3, "conv_in")(x)
        for i, ch in enumerate(self.block_out_channels):
            last = i == len(self.block_out_channels) - 1
            x = _DownBlock(ch, self.layers_per_block, self.groups, not last, name=f"down_blocks_{i}")(x)
        x = MidBlock(self.groups, self.mid_block_add_attention, name="mid_block")(x)
        x = nn.silu(_group_norm(self.groups, "conv_norm_out")(x))
        return _conv(self.out_channels, 3, "conv_out")(x)


class _DownBlock(nn.Module):
    """DownEncoderBlock2D: resnets, then (0, 1, 0, 1) zero pad and a stride-2 3x3 conv (`downsamplers.0.conv`)."""

    features: int
    num_layers: int
    groups: int
    downsample: bool

    @nn.compact
    def __call__(self, x):
        for j in range(self.num_layers):
            x = ResnetBlock(self.features, self.groups, name=f"resnets_{j}")(x)
        if self.downsample:
            x = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))
            x = _Sampler(self.features, 2, name="downsamplers_0")(x)
        return x


class _UpBlock(nn.Module):
    """UpDecoderBlock2D: resnets, then nearest x2 upsampling and a 3x3 conv (`upsamplers.0.conv`)."""

    features: int
    num_layers: int
    groups: int
    upsample: bool

    @nn.compact
    def __call__(self, x):
        for j in range(self.num_layers):
            x = ResnetBlock(self.features, self.groups, name=f"resnets_{j}")(x)
        if self.upsample:
            x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
            x = _Sampler(self.features, 1, name="upsamplers_0")(x)
        return x


class _Sampler(nn.Module):
    """The conv of Downsample2D (stride 2, no padding: the block pads) or Upsample2D (stride 1, padding 1)."""

    features: int
    strides: int

    @nn.compact
    def __call__(self, x):
        return _conv(self.features, 3, "conv", strides=self.strides, padding=0 if self.strides == 2 else 1)(x)


class Decoder(nn.Module):
    """Latents [N, h, w, C] -> images [N, h*f, w*f, out_channels]."""

    block_out_channels: tuple
    layers_per_block: int
    out_channels: int
    groups: int
    mid_block_add_attention: bool = True

    @nn.compact
    def __call__(self, z):
        chans = tuple(reversed(self.block_out_channels))
        x = _conv(chans[0], 3, "conv_in")(z)
        x = MidBlock(self.groups, self.mid_block_add_attention, name="mid_block")(x)
        for i, ch in enumerate(chans):
            x = _UpBlock(ch, self.layers_per_block + 1, self.groups, i < len(chans) - 1, name=f"up_blocks_{i}")(x)
        x = nn.silu(_group_norm(self.groups, "conv_norm_out")(x))
        return _conv(self.out_channels, 3, "conv_out")(x)


def check_block_types(config: dict, source: str = "config.json") -> None:
    """Only the plain VAE blocks are ported: refuse any other kind by name."""
    n = len(config["block_out_channels"])
    for field, kind in (("down_block_types", DOWN_BLOCK), ("up_block_types", UP_BLOCK)):
        types = tuple(config.get(field, (kind,) * n))
        for t in types:
            if t != kind:
                raise ValueError(f"{source}: unsupported {field} entry {t!r} (only {kind} is ported)")
        if len(types) != n:
            raise ValueError(f"{source}: {field} has {len(types)} entries but block_out_channels has {n}")
    if config.get("act_fn", "silu") not in ("silu", "swish"):
        raise ValueError(f"{source}: unsupported act_fn {config['act_fn']!r} (only silu is ported)")


@dataclasses.dataclass(frozen=True)
class KLConfig:
    """The diffusers config.json fields that shape an AutoencoderKL (defaults: diffusers' own)."""

    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple = (64,)
    layers_per_block: int = 1
    latent_channels: int = 4
    norm_num_groups: int = 32
    sample_size: int = 32
    scaling_factor: float = 0.18215
    shift_factor: float | None = None
    use_quant_conv: bool = True
    use_post_quant_conv: bool = True
    mid_block_add_attention: bool = True

    @classmethod
    def from_diffusers(cls, config: dict, source: str = "config.json") -> "KLConfig":
        check_block_types(config, source)
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in config.items() if k in fields}
        kw["block_out_channels"] = tuple(kw.get("block_out_channels", cls.block_out_channels))
        if isinstance(kw.get("sample_size"), list | tuple):
            kw["sample_size"] = kw["sample_size"][0]
        return cls(**kw)

    @property
    def downsample_factor(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)


class AutoencoderKL(nn.Module):
    """diffusers' AutoencoderKL. `encode(x) -> (mean, logvar)`, `decode(z) -> x`; `__call__` reconstructs from the
    posterior mean. x: [N, H, W, in_channels] in [-1, 1]; mean, logvar, z: [N, H/f, W/f, latent_channels], unscaled
    (the scaling factor is applied by latent/base.py)."""

    config: KLConfig

    def setup(self):
        c = self.config
        attn = c.mid_block_add_attention
        self.encoder = Encoder(c.block_out_channels, c.layers_per_block, 2 * c.latent_channels, c.norm_num_groups, attn)
        self.decoder = Decoder(c.block_out_channels, c.layers_per_block, c.out_channels, c.norm_num_groups, attn)
        if c.use_quant_conv:
            self.quant_conv = nn.Conv(2 * c.latent_channels, (1, 1))
        if c.use_post_quant_conv:
            self.post_quant_conv = nn.Conv(c.latent_channels, (1, 1))

    def encode(self, x):
        """Images [N, H, W, C] -> the posterior's (mean, logvar), each [N, H/f, W/f, latent_channels]."""
        moments = self.encoder(x)
        if self.config.use_quant_conv:
            moments = self.quant_conv(moments)
        mean, logvar = jnp.split(moments, 2, axis=-1)
        return mean, jnp.clip(logvar, *LOGVAR_RANGE)

    def sample(self, x, key):
        """A draw from the posterior: mean + exp(logvar / 2) * N(0, I)."""
        mean, logvar = self.encode(x)
        return mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)

    def decode(self, z):
        """Latents [N, h, w, latent_channels] -> images [N, h*f, w*f, out_channels] (not clipped)."""
        if self.config.use_post_quant_conv:
            z = self.post_quant_conv(z)
        return self.decoder(z)

    def __call__(self, x):
        return self.decode(self.encode(x)[0])
