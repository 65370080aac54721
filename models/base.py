"""The model registry (config.model, flat layout: config.model.name, the fields every model has, and the named
model's own fields).

A model part is a class with `name`, `FIELDS`, an optional `check(cfg, ctx)` (ctx["image_size"], ctx["channels"],
ctx["num_classes"]: the dataset's class count, 0 when it has no labels) and
`build(cfg, *, num_classes, out_channels)` -> a Flax module called as

    module.apply(params, x [B, H, W, C], t [B], y [B] int or None, train=..., rngs=...)

that returns the network output [B, H, W, out_channels] in float32 (out_channels is C, or 2C when the process learns the
variance). The module has a `dtype` attribute (its compute dtype): the bound terms and the learned sampler's probes run
a float32 clone, module.clone(dtype=jnp.float32); and a `num_classes` attribute, the K below (make_model checks
both). t is the process's time (an integer timestep for DDPM, passed as a number). With num_classes = K > 0 the module
embeds K + 1 classes, class K being the null class of classifier-free guidance; y=None (only for K = 0) means
unconditional.
"""

from config.fields import Bool, Choice, FieldError, Num
from config.registry import FLAT, Registry

DTYPES = ("float32", "bfloat16", "float16")

COMMON = dict(
    # compute dtype; parameters and optimizer state stay float32
    dtype=Choice("float32", DTYPES),
    # condition on the dataset's class labels (a null class is added for classifier-free guidance)
    class_cond=Bool(False),
    # probability that a training example's label is replaced by the null class (DiT: 0.1)
    label_dropout=Num(0.1, 0.0, 1.0, hi_open=True),
)


def check_common(cfg, ctx):
    if cfg.class_cond and not ctx["num_classes"]:
        raise FieldError("class_cond", True, f"the dataset ({ctx['data_name']}) has no class labels")


MODELS = Registry("model", FLAT, common=COMMON, check=check_common)


def make_model(model_cfg, *, num_classes: int = 0, out_channels: int | None = None):
    """The Flax module config.model names (pass config.model). num_classes: the dataset's class count, used when
    model_cfg.class_cond (0: unconditional); out_channels: None for the input's channel count."""
    k = num_classes if model_cfg.class_cond else 0
    module = MODELS[model_cfg.name].build(model_cfg, num_classes=k, out_channels=out_channels)
    for attr in ("num_classes", "dtype"):
        if not hasattr(module, attr):
            raise TypeError(f"model {model_cfg.name!r}: its module must have `{attr}` (models/base.py)")
    if module.num_classes != k:
        raise TypeError(
            f"model {model_cfg.name!r}: its module has num_classes={module.num_classes!r}, must be {k}, the count it "
            "was built with (models/base.py)"
        )
    return module
