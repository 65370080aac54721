"""DiT and U-ViT: parameter counts of the published sizes (shapes only), the tiny models' forward pass, the
zero start of DiT, the config checks, and one forward pass against the PyTorch originals (fixtures written by
tests/fixtures/make_transformer_counts.py from facebookresearch/DiT and baofff/U-ViT)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.fields import FieldError
from models import MODELS, DiT, UViT, make_model
from models.dit import dit_params_from_torch, sincos_pos_embed_2d, timestep_embedding
from models.uvit import uvit_params_from_torch

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
with open(os.path.join(FIXTURES, "transformer_param_counts.json")) as f:
    COUNTS = json.load(f)

# The published (rounded) sizes that the exact counts round to. DiT (Peebles & Xie; the DiT README and later papers):
# S 33M, B 130M, L 458M, XL/2 675M; DiT's train.py prints 675,129,632 for XL/2, a total that includes the frozen
# pos_embed (256 x 1152), which is a constant here and is not in the fixture's counts. U-ViT (Bao et al., the table of
# configurations): S 44M, S-Deep 58M, M 131M, L 287M, H 501M.
PUBLISHED_M = {
    "DiT-S/2": 33,
    "DiT-B/2": 130,
    "DiT-B/4": 130,
    "DiT-L/2": 458,
    "DiT-XL/2": 675,
    "U-ViT-S/2 ImageNet-256": 45,  # 44.8M with the 1001-row label table (the paper's 44M: CIFAR-10, 44.3M)
    "U-ViT-S/2 CIFAR-10": 44,
    "U-ViT-S-Deep/2 ImageNet-256": 58,
    "U-ViT-M/2 ImageNet-256": 131,
    "U-ViT-L/2 ImageNet-256": 287,
    "U-ViT-H/2 ImageNet-256": 501,
}


def n_params(tree):
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def model_config(name, **fields):
    c = MODELS.default_config(name)
    c.update(fields)
    return c


@pytest.mark.parametrize("entry", sorted(COUNTS))
def test_parameter_counts_equal_the_originals(entry):
    e = COUNTS[entry]
    fields = dict(size=e["size"], patch_size=e["patch_size"], class_cond=e["num_classes"] > 0)
    if e["model"] == "uvit":
        fields["conv"] = e["conv"]
    cfg = model_config(e["model"], **fields)
    MODELS[e["model"]].check(cfg, dict(image_size=e["image_size"], channels=e["channels"]))
    m = make_model(cfg, num_classes=e["num_classes"], out_channels=e["out_channels"])
    x = jax.ShapeDtypeStruct((1, e["image_size"], e["image_size"], e["channels"]), jnp.float32)
    t = jax.ShapeDtypeStruct((1,), jnp.int32)
    y = jax.ShapeDtypeStruct((1,), jnp.int32) if e["num_classes"] else None
    shapes = jax.eval_shape(m.init, jax.random.PRNGKey(0), x, t, y)
    assert n_params(shapes) == e["params"]
    if entry in PUBLISHED_M:
        assert round(e["params"] / 1e6) == PUBLISHED_M[entry]


def tiny(kind, **kw):
    if kind == "dit":
        return DiT(hidden_size=32, depth=2, num_heads=2, **kw)
    return UViT(hidden_size=32, depth=3, num_heads=2, **kw)


def perturbed(params, seed=0, scale=0.2):
    """Every parameter moved off its initial value (DiT's zero-initialised layers included); drawn on the host,
    which costs no compilation."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda p: p + scale * rng.standard_normal(p.shape, np.float32), params)


def init(m, x, t, y):
    # jitted: an eager init dispatches every initialiser's random draw op by op (seconds)
    return jax.jit(lambda key: m.init(key, x, t, y))(jax.random.PRNGKey(0))


CASES = [  # model, patch, input shape, num classes, out channels
    ("dit", 2, (2, 8, 8, 4), 10, 8),
    ("dit", 1, (2, 8, 8, 1), 0, 1),
    ("uvit", 2, (2, 8, 8, 4), 10, 4),
    ("uvit", 1, (2, 8, 8, 1), 0, 2),
]


@pytest.mark.parametrize("kind,patch,shape,classes,out", CASES)
def test_tiny_forward_bfloat16_and_labels(kind, patch, shape, classes, out):
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    t = jnp.array([0, 999])
    y = jnp.array([3, classes]) if classes else None  # the last label: the null class
    m32 = tiny(kind, patch_size=patch, num_classes=classes, out_channels=out)
    params = perturbed(init(m32, x, t, y))
    apply32, applybf = jax.jit(m32.apply), jax.jit(m32.clone(dtype=jnp.bfloat16).apply)
    o32, obf = apply32(params, x, t, y), applybf(params, x, t, y, train=True)
    assert o32.shape == shape[:3] + (out,) and o32.dtype == jnp.float32 and obf.dtype == jnp.float32
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
    assert bool(jnp.isfinite(o32).all()) and float(o32.std()) > 0.1
    rel = float(jnp.linalg.norm(obf - o32) / jnp.linalg.norm(o32))
    assert rel < 0.05, rel
    if classes:  # every example's output depends on its label
        other = apply32(params, x, t, jnp.array([4, 0]))
        assert float(jnp.abs(other - o32).mean(axis=(1, 2, 3)).min()) > 1e-2


def test_labels_required_iff_conditional():
    x, t = jnp.zeros((1, 8, 8, 1)), jnp.zeros((1,), jnp.int32)
    for kind in ("dit", "uvit"):
        with pytest.raises(ValueError, match="needs labels"):
            tiny(kind, num_classes=3).init(jax.random.PRNGKey(0), x, t, None)
        with pytest.raises(ValueError, match="unconditional model"):
            tiny(kind).init(jax.random.PRNGKey(0), x, t, jnp.zeros((1,), jnp.int32))


def test_dit_starts_at_exactly_zero():
    m = tiny("dit", num_classes=10, out_channels=8)
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 8, 8, 4))
    t, y = jnp.array([5, 500]), jnp.array([0, 10])
    params, apply = init(m, x, t, y), jax.jit(m.apply)
    # adaLN-Zero and the zero final layer: exactly zero whatever the input, time or label
    assert float(jnp.abs(apply(params, x, t, y)).max()) == 0.0
    assert float(jnp.abs(apply(params, -x, t + 7, y[::-1])).max()) == 0.0


def test_embeddings_closed_forms():
    # DiT/U-ViT's timestep embedding: cos then sin, frequencies 10000^(-i / half)
    e = timestep_embedding(jnp.array([0.0, 2.0]), 6)
    f = 10000.0 ** (-np.arange(3) / 3)
    np.testing.assert_allclose(e, np.stack([np.r_[np.ones(3), np.zeros(3)], np.r_[np.cos(2 * f), np.sin(2 * f)]]), 1e-6)
    # MAE's 2-D sin-cos: the first half encodes the column, the second the row; token k = (k // w, k % w)
    pe = sincos_pos_embed_2d(8, 2, 3)
    om = 1.0 / 10000 ** (np.arange(2) / 2)
    col, row = np.arange(6) % 3, np.arange(6) // 3
    ref = np.concatenate(
        [np.sin(col[:, None] * om), np.cos(col[:, None] * om), np.sin(row[:, None] * om), np.cos(row[:, None] * om)], 1
    )
    np.testing.assert_allclose(pe, ref, atol=1e-6)


@pytest.mark.parametrize(
    "name,fields,image_size,field,match",
    [
        ("dit", dict(patch_size=4), 6, "patch_size", r"must divide config.data.image_size=6: one of \[1, 2\]"),
        ("uvit", dict(patch_size=8), 12, "patch_size", "must divide config.data.image_size=12"),
        ("dit", dict(size="custom", hidden_size=36, num_heads=5), 8, "num_heads", "must divide hidden_size=36"),
        ("dit", dict(size="custom", hidden_size=30, num_heads=3), 8, "hidden_size", "multiple of 4"),
        ("dit", dict(size="B", hidden_size=32), 8, "hidden_size", r'only size="custom" uses it .*\(768, 12, 12\)'),
        ("uvit", dict(size="custom", depth=4), 8, "depth", "must be odd"),
    ],
)
def test_checks_name_the_field(name, fields, image_size, field, match):
    cfg = model_config(name, **fields)
    with pytest.raises(FieldError, match=match) as e:
        MODELS[name].check(cfg, dict(image_size=image_size, channels=3))
    assert e.value.field == field


def test_defaults_are_the_small_published_sizes():
    assert make_model(MODELS.default_config("dit")) == DiT(hidden_size=384, depth=12, num_heads=6, patch_size=2)
    assert make_model(MODELS.default_config("uvit")) == UViT(hidden_size=512, depth=13, num_heads=8, patch_size=2)


def load_fixture(name):
    d = np.load(os.path.join(FIXTURES, name))
    sd = {k[3:]: d[k] for k in d.files if k.startswith("sd/")}
    y = jnp.asarray(d["y"]) if "y" in d.files else None
    return json.loads(str(d["config"])), sd, jnp.asarray(d["x"]), jnp.asarray(d["t"]), y, d["out"]


@pytest.mark.parametrize("fixture", ["dit_forward.npz", "uvit_forward.npz", "uvit_uncond_forward.npz"])
def test_forward_equals_pytorch_original(fixture):
    cfg, sd, x, t, y, ref = load_fixture(fixture)
    if fixture.startswith("dit"):
        m, params = DiT(**cfg), dit_params_from_torch(sd)
    else:
        m, params = UViT(**cfg), uvit_params_from_torch(sd)
    # the converted tree has exactly the shapes our init makes
    shapes = jax.eval_shape(m.init, jax.random.PRNGKey(0), x, t, y)
    assert jax.tree.map(lambda s: s.shape, shapes) == jax.tree.map(np.shape, params)
    out = jax.jit(m.apply)(params, x, t, y)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
