"""A transformer over tokens (config.model.name = "tokens"): MD4's bidirectional network for masked diffusion
(google-deepmind/md4 `md4/networks/transformer.py`, `cond_type="adaln"`), in this project's DiT blocks.

    module.apply(params, x [B, L] int tokens (V = [MASK]), t [B], None, train=...) -> logits [B, L, V] float32

V = out_channels (the masked process's vocabulary: diffusion/masked.py out_channels); the input table has V + 1
rows, the last for [MASK]. Positions (`positions`): "rope" (the default, MD4's) rotates every attention's queries and
keys by their positions (models/dit.py rope_tables, theta 10000, adjacent feature pairs), so attention sees
relative offsets from the first step; "learned" adds a learned embedding [max_len, hidden] (N(0, 0.02)) to the
input instead. `depth` DiT blocks (models/dit.py DiTBlock: pre-LN, multi-head attention, GELU MLP, adaLN-Zero
modulation from the time embedding); the adaLN final layer to V logits, zero at initialisation (every token starts
uniform: log V nats each).

Why rope is the default: with learned positions at N(0, 0.02) the masked model cannot tell its neighbours from any
other token until the embedding has grown, and on the bundled corpus it sat at the letters' frequencies (4.006 bits
per character, flat over the masking rate) from step 200 to 750 of configs/text.py, where the autoregressive model,
whose shifted input hands it the previous letter without attention, reached 2.71 by step 300
(docs/benchmarks/text.md#positions-why-the-token-transformer-rotates). MD4's own network
(md4/networks/transformer.py) uses RoPE and no position embedding. Where this port differs from that network: DiT's
blocks (a GELU MLP, LayerNorm without affine, a qkv bias) in place of its SwiGLU and RMSNorm.

Time conditioning (`time_cond`): "adaln" embeds t (models/dit.py TimestepEmbedder) and modulates every block (MD4's
adaLN); "none" gives the blocks a zero conditioning vector, so their modulations are learned constants (MD4's
time_features="none": for masked diffusion the network need not see t, the fraction of [MASK] tokens tells it).

`causal=True` is the autoregressive baseline of the same size: causal attention, the input shifted right by one
(a begin token, row V of the table, at position 0), and no time; its logits at position l predict token l from
tokens < l. Trained by diffusion/autoregressive.py.

Sizes: hidden 128, depth 4, heads 4 (1.28M parameters at V = 27 with rope) is the default: configs/text.py's 750
steps of batch 32 x 128 characters take about 4 minutes on one CPU core (docs/benchmarks/compile.md).
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from config.fields import Bool, Choice, FieldError, Int, Num
from models.base import MODELS
from models.dit import DiTBlock, FinalLayer, TimestepEmbedder, rope_tables

TIME_CONDS = ("adaln", "none")
POSITIONS = ("rope", "learned")


class TokenTransformer(nn.Module):
    """x [B, L] int, t [B] -> logits [B, L, out_channels] float32 (module docstring)."""

    out_channels: int
    max_len: int
    hidden_size: int = 128
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: float = 4.0
    time_cond: str = "adaln"
    causal: bool = False
    positions: str = "rope"
    num_classes: int = 0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, t, y=None, train: bool = False):
        del train, y  # no dropout; no classes
        x = jnp.asarray(x).astype(jnp.int32)
        B, L = x.shape
        V, D = self.out_channels, self.hidden_size
        if self.causal:  # position l sees tokens < l: a begin token (row V) first
            x = jnp.concatenate([jnp.full((B, 1), V, jnp.int32), x[:, :-1]], axis=1)
        init = nn.initializers.normal(0.02)
        h = nn.Embed(V + 1, D, embedding_init=init, dtype=self.dtype, name="token_embed")(x)
        rope = None
        if self.positions == "rope":
            rope = rope_tables(L, D // self.num_heads)
        else:
            pos = self.param("pos_embed", init, (self.max_len, D))
            h = h + pos[None, :L].astype(self.dtype)
        if self.time_cond == "adaln" and not self.causal:
            c = TimestepEmbedder(D, dtype=self.dtype, name="t_embedder")(t)
        else:
            c = jnp.zeros((B, D), self.dtype)
        for i in range(self.depth):
            block = DiTBlock(self.num_heads, self.mlp_ratio, dtype=self.dtype, causal=self.causal, name=f"blocks_{i}")
            h = block(h, c, rope)
        return FinalLayer(V, dtype=self.dtype, name="final_layer")(h, c).astype(jnp.float32)


@MODELS.register
class Tokens:
    name = "tokens"
    FIELDS = dict(
        hidden_size=Int(128, 1),
        depth=Int(4, 1),
        num_heads=Int(4, 1),
        mlp_ratio=Num(4.0, 0.0, lo_open=True),
        time_cond=Choice("adaln", TIME_CONDS),
        causal=Bool(False),  # the autoregressive baseline (config.diffusion.name="autoregressive")
        positions=Choice("rope", POSITIONS, absent="learned"),  # text workdirs of before 2026-12-07: learned
        max_len=Int(1024, 1),  # positions='learned': rows of the position embedding, the longest sequence
    )

    @classmethod
    def check(cls, cfg, ctx):
        if cfg.hidden_size % cfg.num_heads:
            raise FieldError("num_heads", cfg.num_heads, f"must divide hidden_size = {cfg.hidden_size}")
        if cfg.positions == "rope" and (cfg.hidden_size // cfg.num_heads) % 2:
            raise FieldError(
                "num_heads",
                cfg.num_heads,
                f"positions='rope' rotates pairs of features: hidden_size / num_heads = "
                f"{cfg.hidden_size // cfg.num_heads} must be even",
            )
        if cfg.class_cond:
            raise FieldError("class_cond", True, "the token transformer has no class labels")
        if cfg.positions == "learned" and ctx["seq_len"] > cfg.max_len:
            raise FieldError(
                "max_len",
                cfg.max_len,
                f"positions='learned' needs a row per position: at least config.data.seq_len = {ctx['seq_len']}",
            )

    @classmethod
    def build(cls, cfg, *, num_classes, out_channels):
        return TokenTransformer(
            out_channels=int(out_channels),
            max_len=cfg.max_len,
            hidden_size=cfg.hidden_size,
            depth=cfg.depth,
            num_heads=cfg.num_heads,
            mlp_ratio=cfg.mlp_ratio,
            time_cond=cfg.time_cond,
            causal=cfg.causal,
            positions=cfg.positions,
            num_classes=0,
            dtype=jnp.dtype(cfg.dtype),
        )
