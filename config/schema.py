"""The whole config's field spec, composed from the parts and sections that own their fields.

    seed, compilation_cache,  here
    host_malloc
    data, model, diffusion    registries, flat: name + common fields + the named part's fields (data/, models/,
                              diffusion/)
    sampler, weighting        registries, nested: name + one sub-config per registered part (samplers/, weightings/)
    train, sample, eval,      config/sections.py
    mesh, diagnostics

`default_config()` builds the defaults (configs/default.py starts from it), validation (config/validate.py), the
"did you mean" suggestions and the run identity (training/checkpoint.py) read the same specs.
"""

from config.fields import Choice, ConfigError, Context, Int, Path, flatten, to_config
from config.registry import FLAT, SAMPLING
from config.sections import DIAGNOSTICS_FIELDS, EVAL_FIELDS, MESH_FIELDS, SAMPLE_FIELDS, TRAIN_FIELDS
from core.host_malloc import CHOICES as HOST_MALLOC
from data import DATASETS, dataset_classes
from diffusion import PROCESSES
from models import MODELS
from samplers import SAMPLERS
from weightings import WEIGHTINGS

TOP_FIELDS = dict(
    seed=Int(0, 0, 2**32 - 1),
    # JAX's persistent compilation cache (training/platform.py): a program compiled once on this machine is read
    # back by every later run, resume, evaluation and notebook chunk; "off": none
    compilation_cache=Path("~/.cache/adaptive-timesteps/jax", mutable=True),
    # glibc's malloc thresholds for XLA's CPU buffers (core/host_malloc.py): "reuse" keeps freed buffers for the
    # next step instead of mapping fresh pages (12% to 40% less time on CPU runs here); "glibc": its defaults
    host_malloc=Choice("reuse", HOST_MALLOC, mutable=True),
)
# section -> registry, and the part a default config names
REGISTRIES = {
    "data": (DATASETS, "digits"),
    "model": (MODELS, "unet"),
    "diffusion": (PROCESSES, "ddpm"),
    "sampler": (SAMPLERS, "uniform"),
    "weighting": (WEIGHTINGS, "none"),
}
SECTIONS = {
    "train": TRAIN_FIELDS,
    "sample": SAMPLE_FIELDS,
    "eval": EVAL_FIELDS,
    "mesh": MESH_FIELDS,
    "diagnostics": DIAGNOSTICS_FIELDS,
}
ORDER = (
    "seed",
    "data",
    "model",
    "diffusion",
    "train",
    "sampler",
    "weighting",
    "sample",
    "eval",
    "mesh",
    "diagnostics",
    "compilation_cache",
    "host_malloc",
)


def _named(config, section):
    """The part a config's section names (its registry's default when the config has no such section)."""
    registry, default = REGISTRIES[section]
    node = config.get(section) if config is not None and hasattr(config, "get") else None
    name = node.get("name", default) if hasattr(node, "get") else default
    return name


def spec(config=None, **names) -> dict:
    """The nested field spec of a config (of the default parts when config is None; `names` pick other parts of
    the flat sections, e.g. model="unet")."""
    out = {}
    for section in ORDER:
        if section in TOP_FIELDS:
            out[section] = TOP_FIELDS[section]
        elif section in REGISTRIES:
            registry = REGISTRIES[section][0]
            name = names.get(section) or _named(config, section)
            if registry.layout == FLAT and name not in registry:
                name = REGISTRIES[section][1]  # an unknown name is reported by check_names
            out[section] = registry.spec(name)
        else:
            out[section] = SECTIONS[section]
    return out


def default_config(**names):
    """The defaults of every field, with the default parts (or those named: default_config(sampler="adaptive"))."""
    config = to_config(spec(**names))
    for section, name in names.items():
        config[section].name = name
    return config


def check_names(config):
    """config.<section>.name of every registry section is a registered part (checked first: the spec of a flat
    section depends on it)."""
    for section, (registry, _) in REGISTRIES.items():
        node = config.get(section)
        if hasattr(node, "get") and "name" in node:
            registry.spec(registry.names()[0])["name"].check(f"{section}.name", node.name)


def active_fields(config) -> dict:
    """{dotted path: Field} of the fields that count for this config: every field, except the sub-configs of
    the sampler and weighting that the config does not name."""
    out = {}
    for section in ORDER:
        if section in TOP_FIELDS:
            out[section] = TOP_FIELDS[section]
        elif section in REGISTRIES:
            out.update(REGISTRIES[section][0].active_fields(config[section]))
        else:
            out.update(flatten(SECTIONS[section], f"{section}."))
    return out


def time_grid(config):
    """(T, where it comes from): a discrete process's timesteps, or a continuous one's grid (the resolution of
    [0, 1] that grids and bin counts are bounded by)."""
    field = PROCESSES[config.diffusion.name].time_field  # the process says which of its fields it is
    return config.diffusion[field], f"config.diffusion.{field}"


def dataset_vocab(data_cfg) -> int:
    """The token vocabulary of the dataset config.data names (data/text.py: 27), 0 for images."""
    return getattr(DATASETS.parts.get(data_cfg.name), "vocab_size", 0)


def context(config, devices=None) -> Context:
    """The values of other sections that bounds and part checks use (T, the batch size, the image size, and the
    data axis's device count D once it is known)."""
    extra = {} if devices is None else {"D": (devices, "the data axis")}
    return Context(
        {
            **extra,
            "T": time_grid(config),
            "B": (config.train.batch_size, "config.train.batch_size"),
            "image_size": (config.data.image_size, "config.data.image_size"),
            "channels": (config.data.channels, "config.data.channels"),
            "data_name": (config.data.name, "config.data.name"),
            "num_classes": (dataset_classes(config.data), "config.data.name"),
            "vocab_size": (dataset_vocab(config.data), "config.data.name"),
            "seq_len": (config.data.get("seq_len", 0), "config.data.seq_len"),  # tokens in a sequence; 0: images
            "causal": (bool(config.model.get("causal", False)), "config.model.causal"),  # the token network's attention
        }
    )


def check_parts(config, devices=None):
    """Each registry's section check and its named part's own check, in ORDER (with the device count once known)."""
    ctx = context(config, devices)
    for section in ORDER:
        if section in REGISTRIES:
            REGISTRIES[section][0].check(config[section], ctx)


def describe(config) -> str:
    """Every field that counts for this config (active_fields), one line each: its value, what it allows and
    whether it defines the run (training/checkpoint.py) or may change when the run resumes."""
    from config.fields import get

    fields, ctx = active_fields(config), context(config)
    width = max(len(f"config.{p} = {get(config, p)!r}") for p in fields)
    lines = []
    for path, field in fields.items():
        what = f"config.{path} = {get(config, path)!r}"
        when = "may change on resume" if field.mutable else "defines the run"
        lines.append(f"{what:<{width}}  # {field.allows(ctx)}; {when}")
    for section in ("sampler", "weighting"):
        others = [n for n in REGISTRIES[section][0].names() if n != config[section].name]
        lines.append(
            f"# config.{section}.<{'|'.join(others)}>.*: the other {section}s' fields, unused with "
            f"config.{section}.name={config[section].name!r}"
        )
    return "\n".join(lines)


def switch_part(config, section: str, name: str) -> list:
    """Make a flat section (data, model, diffusion) name another part, in place: the section recomposed from the
    new part's own defaults; the section's common fields keep the config's values except those the new part gives
    defaults of its own (a dataset's image size and channels). With a new process, a sampling method it lacks
    (config.sample.method, eval.fid.method, eval.periodic.method) becomes the process's default. Returns the
    notes to print, one line each. Nested sections (sampler, weighting) need none of this: every part's
    sub-config is always there."""
    registry = REGISTRIES[section][0]
    if registry.layout != FLAT:
        config[section].name = name
        return []
    part = registry[name]  # an unknown name: one line naming what is allowed
    old = config[section]
    new = registry.default_config(name)
    own = getattr(part, "COMMON_DEFAULTS", {})
    for k in registry.common:
        if k not in own and k in old:
            new[k] = old[k]
    notes = []
    with config.unlocked() if hasattr(config, "unlocked") else _nothing():
        config[section] = new
        if section == "diffusion" and SAMPLING in part.offers(new):
            methods = part.methods
            for path in ("sample.method", "eval.fid.method", "eval.periodic.method"):
                head, _, last = path.rpartition(".")
                node = config
                for k in head.split("."):
                    node = node[k]
                if node[last] not in methods:
                    notes.append(
                        f"note: config.{path}={node[last]!r} is not a sampling method of {name!r}: using "
                        f"{part.default_method!r}"
                    )
                    node[last] = part.default_method
    return notes


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


__all__ = [
    "ConfigError",
    "spec",
    "default_config",
    "active_fields",
    "context",
    "check_names",
    "check_parts",
    "describe",
    "switch_part",
]
