"""U-ViT (Bao et al. 2023, "All are Worth Words: A ViT Backbone for Diffusion Models") in Flax linen.

A port of baofff/U-ViT libs/uvit.py (commit ce55170): patch embedding (a conv with kernel = stride = patch); the
time as a token (the cos-then-sin sinusoidal embedding of width hidden, then Linear-SiLU-Linear when mlp_time_embed)
and, for a class-conditional model, the label as a token before it ([label, time, patches], K + 1 labels, the last
the null class); a learned position embedding (truncated normal, std 0.02); (depth - 1) / 2 in-blocks, a mid-block
and (depth - 1) / 2 out-blocks, each out-block taking the matching in-block's output through a long skip (concat,
then Linear 2D -> D); pre-LN blocks (LayerNorm eps 1e-5 with affine; attention with an optional qkv bias; an exact
GELU MLP of width mlp_ratio * hidden); a final LayerNorm, the decoder_pred linear to p * p * out_channels, the extra
tokens dropped, unpatchify and a 3x3 conv (the original's `conv` flag). Initialisation as the original's: linears
truncated normal std 0.02 with zero bias, the label table N(0, 1) and the convs PyTorch's default (nn.Embedding and
nn.Conv2d, which its _init_weights leaves alone).

`depth` counts every block, as the paper does (U-ViT-S: 13); the original's config `depth` is one less (12).
Sizes (hidden / depth / heads) of the paper's Table 1: S 512/13/8 (44M), S-Deep 512/17/8, M 768/17/12 (131M),
L 1024/21/16 (287M), H 1152/29/16 (501M). The released configs all use qkv_bias=False and mlp_time_embed=False,
and conv=True except U-ViT-H (conv=False); their ImageNet label tables have 1001 rows (1000 classes and the null
class), as ours with num_classes = 1000. Exact parameter counts, from the PyTorch original, are in
tests/fixtures/transformer_param_counts.json. Parameter names follow the PyTorch state dict, so
`uvit_params_from_torch` loads a released checkpoint.

Open choices: compute in config.model.dtype with attention logits and softmax in float32; the final conv and
decoder_pred produce out_channels (2C for a learned variance) where the original has C.
"""

import math
from typing import Any, Mapping

import flax.linen as nn
import jax.numpy as jnp

from config.fields import Bool, Choice, FieldError, Int, Num
from models.base import MODELS
from models.dit import (
    PATCH_SIZES,
    Attention,
    Mlp,
    PatchEmbed,
    check_labels,
    check_transformer,
    params_from_torch,
    size_dims,
    timestep_embedding,
    unpatchify,
)

UVIT_SIZES = {
    "S": (512, 13, 8),
    "S-Deep": (512, 17, 8),
    "M": (768, 17, 12),
    "L": (1024, 21, 16),
    "H": (1152, 29, 16),
}

# timm's trunc_normal_(std=.02) truncates at +-2 absolute, i.e. +-100 std: in effect a normal
trunc_normal = nn.initializers.truncated_normal(0.02, lower=-100.0, upper=100.0)
# PyTorch's default nn.Conv2d initialisation: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)), bias the same
torch_conv_kernel = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def torch_conv_bias(fan_in: int):
    def init(key, shape, dtype=jnp.float32):
        bound = 1.0 / math.sqrt(fan_in)
        return nn.initializers.uniform(2 * bound)(key, shape, dtype) - bound

    return init


def _norm(dtype, name=None):
    return nn.LayerNorm(epsilon=1e-5, dtype=dtype, name=name)


class UViTBlock(nn.Module):
    """Pre-LN transformer block; with `skip`, first Linear(concat(x, skip)) -> D (the long skip connection)."""

    num_heads: int
    mlp_ratio: float
    qkv_bias: bool
    skip: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, skip=None):
        D = x.shape[-1]
        if self.skip:
            x = nn.Dense(D, kernel_init=trunc_normal, dtype=self.dtype, name="skip_linear")(
                jnp.concatenate([x, skip], axis=-1)
            )
        kw = dict(kernel_init=trunc_normal, dtype=self.dtype)
        x = x + Attention(self.num_heads, self.qkv_bias, name="attn", **kw)(_norm(self.dtype, "norm1")(x))
        return x + Mlp(int(D * self.mlp_ratio), approximate_gelu=False, name="mlp", **kw)(_norm(self.dtype, "norm2")(x))


class UViT(nn.Module):
    """U-ViT network. x: [B, H, W, C]; t: [B] timesteps (int or float); y: [B] int labels in 0..num_classes
    (num_classes: the null class) or None when num_classes = 0. Returns [B, H, W, out_channels] float32."""

    hidden_size: int = 512
    depth: int = 13  # every block: (depth - 1) / 2 in, 1 mid, (depth - 1) / 2 out
    num_heads: int = 8
    patch_size: int = 2
    mlp_ratio: float = 4.0
    qkv_bias: bool = False
    mlp_time_embed: bool = False
    conv: bool = True
    num_classes: int = 0  # > 0: class-conditional, with num_classes + 1 embeddings (the last: the null class)
    out_channels: int | None = None  # None: x's channel count (2C for a learned variance)
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, t, y=None, train: bool = False):
        del train  # the original has no dropout; label dropout is the train step's
        check_labels(self.num_classes, y)
        assert self.depth % 2 == 1, self.depth
        B, H, W, C = x.shape
        p, D, dt = self.patch_size, self.hidden_size, self.dtype
        out_channels = self.out_channels or C
        gh, gw = H // p, W // p
        fan_in = C * p * p
        h = PatchEmbed(
            D, p, kernel_init=torch_conv_kernel, bias_init=torch_conv_bias(fan_in), dtype=dt, name="patch_embed"
        )(x.astype(dt))

        time = timestep_embedding(t, D).astype(dt)
        if self.mlp_time_embed:
            time = nn.Dense(4 * D, kernel_init=trunc_normal, dtype=dt, name="time_embed_0")(time)
            time = nn.Dense(D, kernel_init=trunc_normal, dtype=dt, name="time_embed_2")(nn.silu(time))
        tokens = [time[:, None], h]
        if self.num_classes:
            label = nn.Embed(
                self.num_classes + 1, D, embedding_init=nn.initializers.normal(1.0), dtype=dt, name="label_emb"
            )(y)
            tokens.insert(0, label[:, None])
        extras = len(tokens) - 1
        h = jnp.concatenate([tok.astype(dt) for tok in tokens], axis=1)
        h = h + self.param("pos_embed", trunc_normal, (1, extras + gh * gw, D)).astype(dt)

        kw = dict(num_heads=self.num_heads, mlp_ratio=self.mlp_ratio, qkv_bias=self.qkv_bias, dtype=dt)
        skips = []
        for i in range(self.depth // 2):
            h = UViTBlock(name=f"in_blocks_{i}", **kw)(h)
            skips.append(h)
        h = UViTBlock(name="mid_block", **kw)(h)
        for i in range(self.depth // 2):
            h = UViTBlock(skip=True, name=f"out_blocks_{i}", **kw)(h, skips.pop())

        h = _norm(dt, "norm")(h)
        h = nn.Dense(p * p * out_channels, kernel_init=trunc_normal, dtype=dt, name="decoder_pred")(h)
        h = unpatchify(h[:, extras:], gh, gw, p)
        if self.conv:
            h = nn.Conv(
                out_channels,
                (3, 3),
                padding=1,
                kernel_init=torch_conv_kernel,
                bias_init=torch_conv_bias(9 * out_channels),
                dtype=dt,
                name="final_layer",
            )(h)
        return h.astype(jnp.float32)


def uvit_params_from_torch(state_dict: Mapping) -> dict:
    """Flax variables of `UViT` from the original's state dict (e.g. a released imagenet256_uvit_large.pth; its
    label table must have num_classes + 1 rows, as the ImageNet-256/512 ones: 1001)."""
    return params_from_torch(state_dict, embeddings=("label_emb",))


@MODELS.register
class UViTModel:
    """The registered part: U-ViT's config fields (defaults: U-ViT-S/2 as the CIFAR-10 config) and its
    construction. size="custom" takes hidden_size, depth (odd: every block) and num_heads from their fields; a named
    size fixes them, and then they must stay at their defaults."""

    name = "uvit"
    FIELDS = dict(
        size=Choice("S", (*UVIT_SIZES, "custom")),
        patch_size=Int(2, allowed=PATCH_SIZES),
        mlp_ratio=Num(4.0, 0.0, lo_open=True),
        qkv_bias=Bool(False),
        mlp_time_embed=Bool(False),
        # the final 3x3 conv (U-ViT-H's released configs: False)
        conv=Bool(True),
        # used only with size="custom"
        hidden_size=Int(64, 2),
        depth=Int(3, 1),
        num_heads=Int(4, 1),
    )

    @classmethod
    def dims(cls, cfg) -> tuple:
        """(hidden_size, depth, num_heads) of this config."""
        return size_dims(UVIT_SIZES, cfg)

    @classmethod
    def check(cls, cfg, ctx):
        check_transformer(cls, cfg, ctx["image_size"])
        if cfg.size == "custom" and cfg.depth % 2 == 0:
            raise FieldError("depth", cfg.depth, "must be odd: (depth - 1) / 2 in-blocks, a mid-block, as many out")

    @classmethod
    def build(cls, cfg, *, num_classes: int = 0, out_channels: int | None = None) -> UViT:
        hidden, depth, heads = cls.dims(cfg)
        return UViT(
            hidden_size=hidden,
            depth=depth,
            num_heads=heads,
            patch_size=cfg.patch_size,
            mlp_ratio=float(cfg.mlp_ratio),
            qkv_bias=cfg.qkv_bias,
            mlp_time_embed=cfg.mlp_time_embed,
            conv=cfg.conv,
            num_classes=num_classes,
            out_channels=out_channels,
            dtype=jnp.dtype(cfg.dtype),
        )
