"""The model registry (config.model, flat layout: config.model.name, the common compute dtype, and the named
model's own fields).

A model part is a class with `name`, `FIELDS`, an optional `check(cfg, ctx)` (ctx["image_size"], ctx["channels"])
and `build(cfg)` -> a Flax module called as module.apply(params, x [B, H, W, C], t [B], train=..., rngs=...) that
returns the network output of x's shape in float32.
"""

from core.fields import Choice
from core.registry import FLAT, Registry

DTYPES = ("float32", "bfloat16", "float16")

# compute dtype; parameters and optimizer state stay float32
COMMON = dict(dtype=Choice("float32", DTYPES))

MODELS = Registry("model", FLAT, common=COMMON)


def make_model(model_cfg):
    """The Flax module config.model names (pass config.model)."""
    return MODELS[model_cfg.name].build(model_cfg)
