"""Config checks, all in one place, that run before anything compiles; every rule comes from the field specs the
parts declare (config/schema.py). Each failure is one line naming the field, the value and what is allowed.

    rename_fields(config)          a config's fields set under an earlier name, moved to their name (a note)
    check_fields(config)           fields missing from, or unknown to, the config's spec
    check_values(config)           every field's type and range, then each part's own checks (no devices needed:
                                   runs before JAX starts)
    validate(config)               all of the above plus what depends on the devices JAX sees
    check_workdir(workdir)         the workdir can be written

The command line's overrides are checked before the config is parsed (config/overrides.py).
"""

import contextlib
import os
import sys
import tempfile

from config import schema
from config.fields import ConfigError, flatten, get, renamed, unknown_field
from config.registry import SAMPLING
from config.sections import check_eval

__all__ = [
    "ConfigError",
    "rename_fields",
    "check_fields",
    "check_values",
    "validate",
    "check_workdir",
]


def known_fields(config=None):
    return flatten(schema.spec(config))


def _note_renamed(old: str, new: str):
    print(f"note: config.{old} is now config.{new} (the old name still works)", file=sys.stderr, flush=True)


def rename_fields(config):
    """Move fields that a config (an older config file, a notebook's overrides) sets under an earlier name to their
    current name, one note each; the value set under the old name wins over the default. In place; returns it."""
    have = flatten(config)
    for old, new in renamed(known_fields(config)).items():
        if old not in have:
            continue
        _note_renamed(old, new)
        parent, _, last = old.rpartition(".")
        node = get(config, parent) if parent else config
        unlocked = config.unlocked() if hasattr(config, "unlocked") else contextlib.nullcontext()
        with unlocked:
            value = node[last]
            del node[last]
            new_parent, _, new_last = new.rpartition(".")
            (get(config, new_parent) if new_parent else config)[new_last] = value
    return config


def check_fields(config):
    """Every field of the config's spec is there and nothing else (fields under an earlier name are renamed first)."""
    rename_fields(config)
    schema.check_names(config)
    have, known = flatten(config), known_fields(config)
    for path in sorted(have):
        if path not in known:
            raise unknown_field(path, known)
    for path in sorted(known):
        if path not in have:
            raise ConfigError(
                f"config.{path} is missing (its default is {known[path].default!r}); build configs "
                f"from configs/default.py"
            )


def check_values(config):
    """Types and ranges of every field that counts (the named sampler's and weighting's included), then the
    parts' and sections' own checks; raise ConfigError."""
    fields = schema.active_fields(config)
    # the values other fields' bounds refer to, checked first
    for path in ("diffusion.num_timesteps", "diffusion.grid", "train.batch_size", "data.image_size", "data.channels"):
        if path in fields:
            fields[path].check(path, get(config, path))
    ctx = schema.context(config)
    for path, field in fields.items():
        field.check(path, get(config, path), ctx)
    schema.check_parts(config)
    check_eval(config)
    check_guidance(config)
    check_time_domain(config)


def check_time_domain(config):
    """The sampler and the weighting get what they need of the process (check_needs), and the sampling methods are
    the process's (where it samples)."""
    from diffusion import PROCESSES

    process = PROCESSES[config.diffusion.name]
    name = config.diffusion.name
    check_needs(config)
    if SAMPLING not in process.offers(config.diffusion):  # no samples: the methods are not read
        return
    for path in ("sample.method", "eval.fid.method", "eval.periodic.method"):
        method = get(config, path)
        if method not in process.methods:
            raise ConfigError(
                f"config.{path}={method!r} is not allowed with config.diffusion.name={name!r}: its sampling methods "
                f"are {', '.join(process.methods)}"
            )


def check_needs(config):
    """One generic loop: every need the named sampler and weighting declare (Sampler.needs, Weighting.needs:
    config.registry.Need) must be among what the process offers (offers(cfg)); else one line naming the part or its
    field, the process and why, and what to use (the parts that need nothing the process lacks)."""
    from diffusion import PROCESSES
    from samplers import SAMPLERS
    from weightings import WEIGHTINGS

    process = PROCESSES[config.diffusion.name]
    offered = process.offers(config.diffusion)
    sections = (("sampler", SAMPLERS), ("weighting", WEIGHTINGS))
    needs = [  # the parts' own needs first, then their settings'
        (section, registry, need)
        for by_field in (False, True)
        for section, registry in sections
        for need in registry[config[section].name].needs(registry.own_config(config[section]))
        if (need.field is not None) == by_field
    ]
    for section, registry, need in needs:
        part = config[section].name
        if need.capability in offered:
            continue
        where, why = process.lacks(need.capability, config.diffusion)
        if need.field is None:
            ok = [n for n in registry.names() if _part_fits(registry, n, config[section], offered)]
            what, allowed = f"config.{section}.name={part!r}", need.allowed or "one of " + ", ".join(ok)
        else:
            what, allowed = f"config.{registry.prefix(part)}.{need.field}={need.value!r}", need.allowed
        raise ConfigError(f"{what} is not allowed with {where}: {need.why or why}; use {allowed}")


def _part_fits(registry, name, section_cfg, offered) -> bool:
    """Whether part `name`'s own needs (not those of its settings) are all offered."""
    own = registry.own_config(section_cfg, name)
    return all(n.capability in offered for n in registry[name].needs(own) if n.field is None)


def check_guidance(config):
    """A guidance scale other than 1 needs a class-conditional model whose null class is trained."""
    for path in ("sample.guidance_scale", "eval.fid.guidance_scale"):
        scale = get(config, path)
        if scale == 1.0:
            continue
        if not config.model.class_cond:
            raise ConfigError(
                f"config.{path}={scale!r} is not allowed: classifier-free guidance needs a class-conditional model "
                "(config.model.class_cond=True); an unconditional model samples with scale 1"
            )
        if config.model.label_dropout == 0:
            raise ConfigError(
                f"config.{path}={scale!r} is not allowed: the null class is never trained with "
                "config.model.label_dropout=0; use a rate > 0 (DiT: 0.1) or scale 1"
            )


def validate(config):
    """Raise ConfigError on the first bad field: names, types and ranges, then what depends on the devices."""
    import jax

    check_fields(config)
    check_values(config)
    c, B = config, config.train.batch_size
    n = jax.device_count()
    if not (c.mesh.data == -1 or c.mesh.data <= n):
        raise ConfigError(
            f"config.mesh.data={c.mesh.data!r} is not allowed: must be -1 (all devices) or 1..{n} (devices JAX sees)"
        )
    dp = n if c.mesh.data == -1 else c.mesh.data
    if B % dp:
        raise ConfigError(
            f"config.train.batch_size={B!r} is not allowed: must be divisible by the {dp} devices of the data axis"
        )
    if B % jax.process_count():
        raise ConfigError(
            f"config.train.batch_size={B!r} is not allowed: must be divisible by the {jax.process_count()} processes"
        )
    schema.check_parts(config, devices=dp)  # the parts' rules that depend on the device count


def check_workdir(workdir: str, folder: str = ""):
    """The workdir (or its `folder`, where a mode writes: eval/) must be creatable and writable (local paths; remote
    ones are checked by orbax): a read-only mount or a missing permission is one line before anything compiles."""
    if "://" in workdir:
        return
    where = os.path.join(workdir, folder) if folder else workdir
    try:
        os.makedirs(where, exist_ok=True)
        # A probe of its own per process: processes of one job share the workdir, and a shared name let one process
        # remove the probe another was about to remove (FileNotFoundError, seen in CI).
        fd, probe = tempfile.mkstemp(prefix=".write_probe.", dir=where)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        inside = f" ({folder}/ in it)" if folder else ""
        raise ConfigError(f"--workdir={workdir!r} cannot be written{inside}: {e.strerror or e}") from None
