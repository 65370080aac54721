"""DiT (Peebles & Xie 2023, "Scalable Diffusion Models with Transformers") in Flax linen.

A port of facebookresearch/DiT models.py (commit ed81ce2): patchify (a conv with kernel = stride = patch), a fixed
2-D sin-cos position embedding (MAE's, a constant here: the original's frozen `pos_embed` buffer), the timestep
embedding (256 sinusoids, cos then sin, max period 10000, then Linear-SiLU-Linear), the label embedding (K + 1 rows,
the last the null class; label dropout is the train step's), `depth` adaLN-Zero blocks (pre-LN without affine,
eps 1e-6; multi-head attention with a qkv bias; a GELU(tanh) MLP of width mlp_ratio * hidden) and the adaLN final
layer, then unpatchify. Initialisation as the original's `initialize_weights`: xavier-uniform linears (the patch conv
like a linear), N(0, 0.02) label table and timestep MLP, the adaLN modulations and the final linear at zero, so the
network starts at exactly zero. Parameter names follow the PyTorch state dict (`blocks.3.attn.qkv.weight` is
params["blocks_3"]["attn"]["qkv"]["kernel"]), so `dit_params_from_torch` loads a released checkpoint.

Sizes (hidden / depth / heads): S 384/12/6, B 768/12/12, L 1024/24/16, XL 1152/28/16. With 1000 classes and learned
variance at 32x32x4 latents DiT-XL/2 has 675M parameters (tests/fixtures/transformer_param_counts.json has the exact
counts, from the PyTorch original).

Open choices: compute in config.model.dtype with attention logits and softmax in float32 (the original runs float32
or AMP); t may be fractional (the original casts it to float too).
"""

import math
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from config.fields import Choice, FieldError, Int, Num
from models.base import MODELS

DIT_SIZES = {"S": (384, 12, 6), "B": (768, 12, 12), "L": (1024, 24, 16), "XL": (1152, 28, 16)}
PATCH_SIZES = (1, 2, 4, 8)

xavier_uniform = nn.initializers.xavier_uniform()
zeros = nn.initializers.zeros


def timestep_embedding(t, dim: int, max_period: float = 10000.0):
    """Sinusoidal embedding [B, dim] float32 of timesteps t [B] (int or float), as DiT and U-ViT (GLIDE's form):
    frequencies max_period^(-i / half), cos then sin, a zero column when dim is odd."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    args = jnp.asarray(t).astype(jnp.float32)[:, None] * freqs[None]
    emb = jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)
    return jnp.pad(emb, ((0, 0), (0, dim % 2)))


def sincos_pos_embed_2d(dim: int, grid_h: int, grid_w: int) -> np.ndarray:
    """MAE's fixed 2-D sin-cos position embedding [grid_h * grid_w, dim] float32 (row-major tokens). As the
    original, the first half of the channels encodes the column (its meshgrid puts w first), the second the row."""
    assert dim % 4 == 0, dim

    def one_d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1).astype(np.float64), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    gw, gh = np.meshgrid(np.arange(grid_w, dtype=np.float32), np.arange(grid_h, dtype=np.float32))
    return np.concatenate([one_d(dim // 2, gw), one_d(dim // 2, gh)], axis=1).astype(np.float32)


def unpatchify(x, grid_h: int, grid_w: int, patch: int):
    """[B, h * w, p * p * C] tokens (each patch row-major, channels last) -> [B, h * p, w * p, C]."""
    B, _, D = x.shape
    C = D // (patch * patch)
    x = x.reshape(B, grid_h, grid_w, patch, patch, C).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, grid_h * patch, grid_w * patch, C)


class PatchEmbed(nn.Module):
    """[B, H, W, C] -> [B, (H/p) * (W/p), hidden] by a conv with kernel = stride = p."""

    hidden_size: int
    patch_size: int
    kernel_init: Callable = xavier_uniform
    bias_init: Callable | None = None
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        p = self.patch_size
        kw = {} if self.bias_init is None else dict(bias_init=self.bias_init)
        h = nn.Conv(
            self.hidden_size,
            (p, p),
            strides=(p, p),
            padding="VALID",
            kernel_init=self.kernel_init,
            dtype=self.dtype,
            name="proj",
            **kw,
        )(x)
        B, gh, gw, D = h.shape
        return h.reshape(B, gh * gw, D)


def rope_tables(length: int, head_dim: int, theta: float = 10000.0):
    """Rotary position embedding's (cos, sin) tables [length, head_dim / 2] (Su et al. 2021, RoFormer), as MD4's
    `precompute_freqs_cis` (google-deepmind/md4 md4/networks/transformer.py): frequency theta^(-2i / head_dim) for
    the pair i, angle position * frequency."""
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2)[: head_dim // 2] / head_dim)
    angles = np.outer(np.arange(length), freqs)
    return jnp.asarray(np.cos(angles), jnp.float32), jnp.asarray(np.sin(angles), jnp.float32)


def apply_rope(x, cos, sin):
    """x [B, L, heads, head_dim] with each pair of adjacent features (2i, 2i + 1) rotated by position l's angle i
    (MD4's `apply_rotary_emb`: the pairs are adjacent, not the two halves); cos, sin [L, head_dim / 2]."""
    pairs = x.reshape(x.shape[:-1] + (-1, 2)).astype(jnp.float32)
    re, im = pairs[..., 0], pairs[..., 1]
    c, s = cos[None, :, None], sin[None, :, None]
    out = jnp.stack([re * c - im * s, re * s + im * c], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)


class Attention(nn.Module):
    """Multi-head self-attention (timm's / U-ViT's): one qkv linear laid out as (3, heads, head_dim), scale
    head_dim^-1/2, logits and softmax in float32, an output projection. With rope=(cos, sin) (rope_tables) the
    queries and keys are rotated by their positions first (the token transformer's relative positions)."""

    num_heads: int
    qkv_bias: bool
    kernel_init: Callable = xavier_uniform
    dtype: Any = jnp.float32
    causal: bool = False  # token i attends to tokens 0..i only (the autoregressive baseline of models/tokens.py)

    @nn.compact
    def __call__(self, x, rope=None):
        B, L, D = x.shape
        h = self.num_heads
        qkv = nn.Dense(3 * D, use_bias=self.qkv_bias, kernel_init=self.kernel_init, dtype=self.dtype, name="qkv")(x)
        q, k, v = (qkv.reshape(B, L, 3, h, D // h)[:, :, i] for i in range(3))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        # logits and softmax in float32 whatever the compute dtype (as models.unet.AttnBlock)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * (D // h) ** -0.5
        if self.causal:
            logits = jnp.where(jnp.tril(jnp.ones((L, L), bool)), logits, -jnp.inf)
        w = nn.softmax(logits, axis=-1).astype(self.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, L, D)
        return nn.Dense(D, kernel_init=self.kernel_init, dtype=self.dtype, name="proj")(out)


class Mlp(nn.Module):
    """fc1 -> GELU (tanh approximation for DiT, exact for U-ViT) -> fc2."""

    hidden: int
    approximate_gelu: bool
    kernel_init: Callable = xavier_uniform
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.hidden, kernel_init=self.kernel_init, dtype=self.dtype, name="fc1")(x)
        h = nn.gelu(h, approximate=self.approximate_gelu)
        return nn.Dense(x.shape[-1], kernel_init=self.kernel_init, dtype=self.dtype, name="fc2")(h)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


def check_labels(num_classes: int, y):
    """Labels are required iff num_classes > 0 (the contract of models.unet.class_embedding)."""
    if not num_classes and y is not None:
        raise ValueError("labels passed to an unconditional model (config.model.class_cond=False)")
    if num_classes and y is None:
        raise ValueError("a class-conditional model needs labels y (pass the null class for unconditional)")


def _norm(dtype):
    # DiT's LayerNorm(elementwise_affine=False, eps=1e-6): no parameters
    return nn.LayerNorm(epsilon=1e-6, use_bias=False, use_scale=False, dtype=dtype)


# the original initialises the patch conv like a linear: xavier-uniform over (p * p * C) -> hidden
_patch_init = nn.initializers.variance_scaling(1.0, "fan_avg", "uniform", in_axis=(0, 1, 2), out_axis=-1)


class TimestepEmbedder(nn.Module):
    """t [B] -> 256 sinusoids -> Linear -> SiLU -> Linear: [B, hidden]."""

    hidden_size: int
    frequency_embedding_size: int = 256
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, t):
        init = nn.initializers.normal(0.02)
        h = timestep_embedding(t, self.frequency_embedding_size).astype(self.dtype)
        h = nn.Dense(self.hidden_size, kernel_init=init, dtype=self.dtype, name="mlp_0")(h)
        return nn.Dense(self.hidden_size, kernel_init=init, dtype=self.dtype, name="mlp_2")(nn.silu(h))


class LabelEmbedder(nn.Module):
    """y [B] in 0..num_classes -> [B, hidden]: a table of num_classes + 1 rows (the last: the null class)."""

    num_classes: int
    hidden_size: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, y):
        return nn.Embed(
            self.num_classes + 1,
            self.hidden_size,
            embedding_init=nn.initializers.normal(0.02),
            dtype=self.dtype,
            name="embedding_table",
        )(y)


class DiTBlock(nn.Module):
    """adaLN-Zero block: x + gate * attn(modulate(LN(x))), then the same with the MLP; 6 modulations from SiLU(c)."""

    num_heads: int
    mlp_ratio: float
    dtype: Any = jnp.float32
    causal: bool = False

    @nn.compact
    def __call__(self, x, c, rope=None):
        D = x.shape[-1]
        mod = nn.Dense(6 * D, kernel_init=zeros, dtype=self.dtype, name="adaLN_modulation")(nn.silu(c))
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = jnp.split(mod, 6, axis=-1)
        h = Attention(self.num_heads, qkv_bias=True, dtype=self.dtype, causal=self.causal, name="attn")(
            modulate(_norm(self.dtype)(x), shift_msa, scale_msa), rope
        )
        x = x + gate_msa[:, None] * h
        h = Mlp(int(D * self.mlp_ratio), approximate_gelu=True, dtype=self.dtype, name="mlp")(
            modulate(_norm(self.dtype)(x), shift_mlp, scale_mlp)
        )
        return x + gate_mlp[:, None] * h


class FinalLayer(nn.Module):
    """modulate(LN(x), shift, scale) from SiLU(c), then a linear to p * p * out_channels; both zero-initialised."""

    out_dim: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, c):
        mod = nn.Dense(2 * x.shape[-1], kernel_init=zeros, dtype=self.dtype, name="adaLN_modulation")(nn.silu(c))
        shift, scale = jnp.split(mod, 2, axis=-1)
        x = modulate(_norm(self.dtype)(x), shift, scale)
        return nn.Dense(self.out_dim, kernel_init=zeros, dtype=self.dtype, name="linear")(x)


class DiT(nn.Module):
    """DiT network. x: [B, H, W, C]; t: [B] timesteps (int or float); y: [B] int labels in 0..num_classes
    (num_classes: the null class) or None when num_classes = 0. Returns [B, H, W, out_channels] float32."""

    hidden_size: int = 384
    depth: int = 12
    num_heads: int = 6
    patch_size: int = 2
    mlp_ratio: float = 4.0
    num_classes: int = 0  # > 0: class-conditional, with num_classes + 1 embeddings (the last: the null class)
    out_channels: int | None = None  # None: x's channel count (2C for a learned variance)
    frequency_embedding_size: int = 256
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, t, y=None, train: bool = False):
        del train  # the original has no dropout; label dropout is the train step's
        check_labels(self.num_classes, y)
        B, H, W, C = x.shape
        p, D = self.patch_size, self.hidden_size
        gh, gw = H // p, W // p
        h = PatchEmbed(D, p, kernel_init=_patch_init, dtype=self.dtype, name="x_embedder")(x.astype(self.dtype))
        h = h + jnp.asarray(sincos_pos_embed_2d(D, gh, gw), self.dtype)[None]
        c = TimestepEmbedder(D, self.frequency_embedding_size, dtype=self.dtype, name="t_embedder")(t)
        if self.num_classes:
            c = c + LabelEmbedder(self.num_classes, D, dtype=self.dtype, name="y_embedder")(y)
        for i in range(self.depth):
            h = DiTBlock(self.num_heads, self.mlp_ratio, dtype=self.dtype, name=f"blocks_{i}")(h, c)
        h = FinalLayer(p * p * (self.out_channels or C), dtype=self.dtype, name="final_layer")(h, c)
        return unpatchify(h, gh, gw, p).astype(jnp.float32)


def params_from_torch(state_dict: Mapping, *, embeddings=(), renames: Mapping[str, str] | None = None, skip=()) -> dict:
    """Flax variables {"params": ...} from a PyTorch state dict of a module whose Flax twin names its submodules as
    the torch ones, numeric indices joined with "_" ("blocks.3.mlp.fc1.weight" -> blocks_3/mlp/fc1/kernel).
    Linear weights are transposed, conv weights [O, I, kh, kw] -> [kh, kw, I, O], 1-D weights are LayerNorm scales;
    `embeddings`: the names of nn.Embedding modules (weight -> embedding, as is); `renames`: module names to
    change after joining; `skip`: keys to leave out (buffers). Values: torch tensors or arrays."""
    params: dict = {}
    for key, value in state_dict.items():
        if key in skip:
            continue
        v = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        v = np.asarray(v, np.float32)
        parts: list = []
        for part in key.split("."):
            if part.isdigit() and parts:
                parts[-1] = f"{parts[-1]}_{part}"
            else:
                parts.append(part)
        *path, leaf = [(renames or {}).get(q, q) for q in parts]
        if leaf == "weight":
            if path and path[-1] in embeddings:
                leaf = "embedding"
            elif v.ndim == 4:
                v, leaf = v.transpose(2, 3, 1, 0), "kernel"
            elif v.ndim == 2:
                v, leaf = v.T, "kernel"
            elif v.ndim == 1:
                leaf = "scale"
        node = params
        for q in path:
            node = node.setdefault(q, {})
        if leaf in node:
            raise ValueError(f"two torch keys map to {'/'.join(path + [leaf])}")
        node[leaf] = np.ascontiguousarray(v)
    return {"params": params}


def dit_params_from_torch(state_dict: Mapping) -> dict:
    """Flax variables of `DiT` from the original's state dict (e.g. a released DiT-XL-2-256x256.pt); the frozen
    pos_embed is left out (ours is the same constant)."""
    return params_from_torch(
        state_dict,
        embeddings=("embedding_table",),
        renames={"adaLN_modulation_1": "adaLN_modulation"},
        skip=("pos_embed",),
    )


@MODELS.register
class DiTModel:
    """The registered part: DiT's config fields (defaults: DiT-S/2) and its construction. size="custom" takes
    hidden_size, depth and num_heads from their fields (tiny models for tests and laptops); a named size fixes them,
    and then they must stay at their defaults."""

    name = "dit"
    FIELDS = dict(
        size=Choice("S", (*DIT_SIZES, "custom")),
        patch_size=Int(2, allowed=PATCH_SIZES),
        mlp_ratio=Num(4.0, 0.0, lo_open=True),
        # used only with size="custom"
        hidden_size=Int(64, 4),
        depth=Int(2, 1),
        num_heads=Int(4, 1),
    )

    @classmethod
    def dims(cls, cfg) -> tuple:
        """(hidden_size, depth, num_heads) of this config."""
        return size_dims(DIT_SIZES, cfg)

    @classmethod
    def check(cls, cfg, ctx):
        check_transformer(cls, cfg, ctx["image_size"])
        hidden = cls.dims(cfg)[0]
        if hidden % 4:
            raise FieldError("hidden_size", hidden, "must be a multiple of 4 (the 2-D sin-cos position embedding)")

    @classmethod
    def build(cls, cfg, *, num_classes: int = 0, out_channels: int | None = None) -> DiT:
        hidden, depth, heads = cls.dims(cfg)
        return DiT(
            hidden_size=hidden,
            depth=depth,
            num_heads=heads,
            patch_size=cfg.patch_size,
            mlp_ratio=float(cfg.mlp_ratio),
            num_classes=num_classes,
            out_channels=out_channels,
            dtype=jnp.dtype(cfg.dtype),
        )


def size_dims(sizes: dict, cfg) -> tuple:
    """(hidden_size, depth, num_heads): the named size's from `sizes`, or the custom fields."""
    return sizes[cfg.size] if cfg.size != "custom" else (cfg.hidden_size, cfg.depth, cfg.num_heads)


def check_transformer(part, cfg, image_size: int):
    """The checks DiT and U-ViT share: the custom-size fields only with size="custom", heads dividing the width,
    the patch dividing the image. Raises FieldError naming the field."""
    if cfg.size != "custom":
        for f in ("hidden_size", "depth", "num_heads"):
            if cfg[f] != part.FIELDS[f].default:
                raise FieldError(
                    f,
                    cfg[f],
                    f'only size="custom" uses it (size="{cfg.size}" fixes (hidden_size, depth, num_heads) = '
                    f"{part.dims(cfg)}); leave it at {part.FIELDS[f].default}",
                )
    hidden, _, heads = part.dims(cfg)
    if hidden % heads:
        raise FieldError("num_heads", heads, f"must divide hidden_size={hidden}")
    if image_size % cfg.patch_size:
        raise FieldError(
            "patch_size",
            cfg.patch_size,
            f"must divide config.data.image_size={image_size}: one of "
            f"{[p for p in PATCH_SIZES if image_size % p == 0]}",
        )
