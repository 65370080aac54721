"""Config checks, all in one place, that run before anything compiles. Each failure is one line naming the field, the
value and what is allowed.

    check_overrides(argv)  command-line overrides that name no field (with the nearest valid one)
    check_fields(config)   fields missing from, or unknown to, the default config
    check_values(config)   every field's type and range (no devices needed: runs before JAX starts)
    validate(config)       all of the above plus what depends on the devices JAX sees
"""
import difflib
import os

import numpy as np

from data.sources import DATASETS
from diffusion.gaussian import TARGETS, VARIANCES
from diffusion.sampling import METHODS
from evaluation.features import DIGITS, check_reference_stats, kind as fid_kind
from diffusion.schedules import SCHEDULES, betas_for
from models.unet import check_image_size
from samplers import SAMPLERS
from weightings import WEIGHTINGS

DTYPES = ("float32", "bfloat16", "float16")


class ConfigError(ValueError):
    pass


def flatten(config, prefix=""):
    """{dotted path: value} of every leaf of a ConfigDict (or dict)."""
    out = {}
    for k, v in config.items():
        if hasattr(v, "items"):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def known_fields():
    from configs.default import get_config

    return flatten(get_config())


def _initials(name):
    return "".join(w[0] for w in name.split("_") if w)


def nearest(path, fields):
    """The valid field most like `path`, or None: in the same section a field with these initials or this word
    (train.learning_rate -> train.lr, sampler.adaptive.lr -> policy_lr), the same name in another section
    (train.dropout -> model.dropout), then the closest spelling."""
    fields = sorted(fields)
    parent, _, last = path.rpartition(".")
    siblings = [f for f in fields if f.rpartition(".")[0] == parent]
    for f in siblings:
        other = f.rpartition(".")[2]
        if "_" in last + other and (_initials(last) == other or _initials(other) == last):
            return f
        if other.endswith("_" + last) or other.startswith(last + "_"):
            return f
    same_name = [f for f in fields if f.rpartition(".")[2] == last]
    if same_name:
        return same_name[0]
    close = difflib.get_close_matches(path, fields, n=1, cutoff=0.6)
    if close:
        return close[0]
    by_last = {}
    for f in fields:
        by_last.setdefault(f.rpartition(".")[2], f)
    close = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.6)
    return by_last[close[0]] if close else None


def _unknown(path, fields, how):
    near = nearest(path, fields)
    hint = f"; did you mean config.{near}?" if near else "; see configs/default.py for the fields"
    return ConfigError(f"{how}config.{path} is not a config field{hint}")


def check_overrides(argv):
    """--config.A.B=V flags whose A.B is not a field (ml_collections would raise deep in flag parsing)."""
    fields = known_fields()
    prefixes = {f.rsplit(".", i)[0] for f in fields for i in range(1, f.count(".") + 1)}
    for arg in argv:
        if arg.startswith("--config."):
            path = arg[len("--config."):].split("=", 1)[0]
            if path not in fields and path not in prefixes:
                raise _unknown(path, fields, f"--config.{path}: ")


def check_fields(config):
    have, known = flatten(config), known_fields()
    for path in sorted(have):
        if path not in known:
            raise _unknown(path, known, "")
    for path in sorted(known):
        if path not in have:
            raise ConfigError(f"config.{path} is missing (configs/default.py sets it to {known[path]!r}); "
                              f"build configs from configs/default.py")


def _get(config, field):
    value = config
    for part in field.split("."):
        value = value[part]
    return value


def _require(ok, field, value, allowed):
    if not ok:
        raise ConfigError(f"config.{field}={value!r} is not allowed: {allowed}")


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _int(c, field, lo, hi=None, extra=()):
    v = _get(c, field)
    ok = v in extra or (_is_int(v) and v >= lo and (hi is None or v <= hi))
    what = f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi}"
    _require(ok, field, v, "must be " + " or ".join([f"{e}" for e in extra] + [what]))


def _num(c, field, lo=None, hi=None, lo_open=False, hi_open=False):
    v = _get(c, field)
    ok = _is_num(v) and np.isfinite(v)
    ok = ok and (lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or (v < hi if hi_open else v <= hi))
    if lo is not None and hi is not None:
        what = f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    elif lo is not None:
        what = f"{'>' if lo_open else '>='} {lo}"
    else:
        what = "finite"
    _require(ok, field, v, f"must be a number {what}")


def _bool(c, field):
    v = _get(c, field)
    _require(isinstance(v, (bool, np.bool_)), field, v, "must be True or False")


def _one_of(c, field, allowed):
    v = _get(c, field)
    _require(isinstance(v, str) and v in allowed, field, v, f"must be one of {', '.join(map(str, allowed))}")


def _ints(c, field, lo, allow_empty=False):
    v = _get(c, field)
    ok = isinstance(v, (tuple, list)) and (allow_empty or len(v) > 0) and all(_is_int(x) and x >= lo for x in v)
    _require(ok, field, v, f"must be a {'' if allow_empty else 'non-empty '}tuple of integers >= {lo}")


def check_values(config):
    """Types and ranges of every field (those of the named sampler and weighting included); raise ConfigError."""
    c = config
    _int(c, "seed", 0, 2**32 - 1)
    _one_of(c, "data.name", DATASETS)
    _require(isinstance(c.data.data_dir, str), "data.data_dir", c.data.data_dir, "must be a path (a string)")
    _int(c, "data.image_size", 1)
    _int(c, "data.channels", 1, 3)
    _require(c.data.channels in (1, 3), "data.channels", c.data.channels, "must be 1 or 3")
    if c.data.name == "digits":
        _require(c.data.image_size == 8, "data.image_size", c.data.image_size, "the embedded digits are 8x8")
        _require(c.data.channels == 1, "data.channels", c.data.channels, "the embedded digits have 1 channel")

    _int(c, "model.ch", 1)
    _ints(c, "model.ch_mult", 1)
    _int(c, "model.num_res_blocks", 1)
    _ints(c, "model.attn_resolutions", 1, allow_empty=True)
    _int(c, "model.num_groups", 1)
    try:
        check_image_size(c.data.image_size, c.model.ch_mult, c.model.attn_resolutions)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    _require(all(c.model.ch * m % c.model.num_groups == 0 for m in c.model.ch_mult),
             "model.num_groups", c.model.num_groups,
             f"must divide every level's channel count {[c.model.ch * m for m in c.model.ch_mult]}")
    _num(c, "model.dropout", 0.0, 1.0, hi_open=True)
    _one_of(c, "model.dtype", DTYPES)

    _one_of(c, "diffusion.schedule", SCHEDULES)
    _one_of(c, "diffusion.target", TARGETS)
    _one_of(c, "diffusion.variance", VARIANCES)
    _int(c, "diffusion.num_timesteps", 2)
    betas = betas_for(c.diffusion.schedule, c.diffusion.num_timesteps)
    _require(betas.max() < 1.0, "diffusion.num_timesteps", c.diffusion.num_timesteps,
             f"the {c.diffusion.schedule} schedule's betas, scaled by 1000/T, reach {betas.max():.3g}: use T > 20 "
             f"or the cosine schedule")
    T = c.diffusion.num_timesteps

    _int(c, "train.num_steps", 0)
    _int(c, "train.batch_size", 1)
    _num(c, "train.lr", 0.0)
    _int(c, "train.warmup_steps", 0)
    _num(c, "train.grad_clip", 0.0, lo_open=True)
    _num(c, "train.b1", 0.0, 1.0, hi_open=True)
    _num(c, "train.b2", 0.0, 1.0, hi_open=True)
    _num(c, "train.ema_decay", 0.0, 1.0)
    _int(c, "train.log_every", 1)
    _int(c, "train.ckpt_every", 1)
    _int(c, "train.keep_checkpoints", 1)

    _one_of(c, "sampler.name", sorted(SAMPLERS))
    _one_of(c, "weighting.name", sorted(WEIGHTINGS))
    if c.sampler.name == "adaptive":
        a = "sampler.adaptive."
        for f in ("policy_b1", "policy_b2"):
            _num(c, a + f, 0.0, 1.0, hi_open=True)
        _num(c, a + "policy_lr", 0.0)
        _num(c, a + "entropy_coef", 0.0)
        _num(c, a + "policy_grad_clip", 0.0, lo_open=True)
        for f in ("common_noise", "probe_dropout"):
            _bool(c, a + f)
        _ints(c, a + "policy_channels", 1, allow_empty=True)
        _ints(c, a + "policy_hidden", 1, allow_empty=True)
        for f in ("num_selected", "update_every", "buffer_size", "sweep_stride", "sweep_images"):
            _int(c, a + f, 1)
        _int(c, a + "probe_batch_size", 1, extra=(-1,))
        _int(c, a + "probe_chunk_rows", 0)
    if c.sampler.name == "grad_variance":
        _bool(c, "sampler.grad_variance.importance_weights")
    try:  # the named sampler's and weighting's own ranges, which depend on T and the batch
        SAMPLERS[c.sampler.name].validate(c)
        WEIGHTINGS[c.weighting.name].validate(c)
    except ValueError as e:
        raise ConfigError(str(e)) from None

    _one_of(c, "sample.method", METHODS)
    _int(c, "sample.num", 1)
    _int(c, "sample.ddim_steps", 1, T)
    _int(c, "mesh.data", 1, extra=(-1,))
    _int(c, "mesh.cpu_devices", 1, extra=(-1,))
    _bool(c, "mesh.shard_params")
    _int(c, "diagnostics.t_bins", 1, T)
    _int(c, "eval.nll_images", 1, extra=(-1,))
    _int(c, "eval.batch_size", 1)
    _int(c, "eval.chunk_rows", 0)
    _int(c, "eval.num_samples", 1)
    f = "eval.fid."
    _int(c, f + "num_samples", 2)
    _one_of(c, f + "method", METHODS)
    _int(c, f + "ddim_steps", 1, T)
    _int(c, f + "batch_size", 1)
    _int(c, f + "kid_subsets", 1)
    _int(c, f + "kid_subset_size", 2)
    for name in ("inception_weights", "reference_stats", "classifier_cache"):
        _require(isinstance(_get(c, f + name), str), f + name, _get(c, f + name), "must be a path (a string)")
    _one_of(c, f + "features", ("auto", "classifier", "inception"))
    _require(c.eval.fid.features != "classifier" or c.data.name in DIGITS, f + "features",
             c.eval.fid.features, f"the classifier is trained on the digits; config.data.name is {c.data.name!r}")
    weights, stats = c.eval.fid.inception_weights, c.eval.fid.reference_stats
    _require(c.eval.fid.features != "inception" or weights, f + "features", c.eval.fid.features,
             "needs config.eval.fid.inception_weights (README: FID)")
    exists = lambda path: "://" in path or os.path.isfile(path)
    _require(not weights or exists(weights), f + "inception_weights", weights,
             "no such file (pytorch-fid's pt_inception-2015-12-05-6726825d.pth; README: FID)")
    if fid_kind(c) == "inception":
        _require(stats != "", f + "reference_stats", stats, "must be set with config.eval.fid.inception_weights: "
                 "the dataset's statistics, made by `python -m evaluation.reference` (README: FID)")
    _require(not stats or exists(stats), f + "reference_stats", stats,
             "no such file (make it with `python -m evaluation.reference`; README: FID)")
    if stats and "://" not in stats and fid_kind(c) != "classifier":
        problem = check_reference_stats(c)
        _require(problem is None, f + "reference_stats", stats, problem)
    p = "eval.periodic."
    _int(c, p + "every", 0)
    _int(c, p + "nll_images", 1, extra=(-1,))
    _int(c, p + "nll_timesteps", 2, T)
    _int(c, p + "num_samples", 2)
    _one_of(c, p + "method", METHODS)
    _int(c, p + "ddim_steps", 1, T)


def validate(config):
    """Raise ConfigError on the first bad field: names, types and ranges, then what depends on the devices."""
    import jax

    check_fields(config)
    check_values(config)
    c, B = config, config.train.batch_size
    n = jax.device_count()
    _require(c.mesh.data == -1 or c.mesh.data <= n, "mesh.data", c.mesh.data,
             f"must be -1 (all devices) or 1..{n} (devices JAX sees)")
    dp = n if c.mesh.data == -1 else c.mesh.data
    _require(B % dp == 0, "train.batch_size", B, f"must be divisible by the {dp} devices of the data axis")
    _require(B % jax.process_count() == 0, "train.batch_size", B,
             f"must be divisible by the {jax.process_count()} processes")


def check_workdir(workdir: str):
    """The workdir must be creatable and writable (local paths; remote ones are checked by orbax)."""
    if "://" in workdir:
        return
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, ".write_probe")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"--workdir={workdir!r} cannot be written: {e.strerror or e}") from None
