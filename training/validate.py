"""Config checks that run before anything compiles. Each failure is one line naming the field, the value and what
is allowed."""
import os

import jax

from data.sources import DATASETS
from diffusion.gaussian import TARGETS, VARIANCES
from diffusion.sampling import METHODS
from diffusion.schedules import SCHEDULES
from models.unet import check_image_size
from samplers import SAMPLERS
from weightings import WEIGHTINGS

DTYPES = ("float32", "bfloat16", "float16")


class ConfigError(ValueError):
    pass


def _require(ok, field, value, allowed):
    if not ok:
        raise ConfigError(f"config.{field}={value!r} is not allowed: {allowed}")


def _one_of(config, field, allowed):
    value = config
    for part in field.split("."):
        value = value[part]
    _require(value in allowed, field, value, f"must be one of {', '.join(map(str, allowed))}")


def validate(config):
    """Raise ConfigError on the first bad field."""
    c = config
    _one_of(c, "data.name", DATASETS)
    _require(c.data.channels in (1, 3), "data.channels", c.data.channels, "must be 1 or 3")
    if c.data.name == "digits":
        _require(c.data.image_size == 8, "data.image_size", c.data.image_size, "the embedded digits are 8x8")
        _require(c.data.channels == 1, "data.channels", c.data.channels, "the embedded digits have 1 channel")
    try:
        check_image_size(c.data.image_size, c.model.ch_mult, c.model.attn_resolutions)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    _require(c.model.ch > 0 and all(c.model.ch * m % c.model.num_groups == 0 for m in c.model.ch_mult),
             "model.num_groups", c.model.num_groups,
             f"must divide every level's channel count {[c.model.ch * m for m in c.model.ch_mult]}")
    _require(0.0 <= c.model.dropout < 1.0, "model.dropout", c.model.dropout, "must be in [0, 1)")
    _one_of(c, "model.dtype", DTYPES)
    _one_of(c, "diffusion.schedule", SCHEDULES)
    _one_of(c, "diffusion.target", TARGETS)
    _one_of(c, "diffusion.variance", VARIANCES)
    _require(c.diffusion.num_timesteps >= 2, "diffusion.num_timesteps", c.diffusion.num_timesteps, "must be >= 2")

    t = c.train
    _require(t.num_steps >= 0, "train.num_steps", t.num_steps, "must be >= 0")
    _require(t.batch_size >= 1, "train.batch_size", t.batch_size, "must be >= 1")
    _require(t.lr >= 0, "train.lr", t.lr, "must be >= 0")
    _require(t.warmup_steps >= 0, "train.warmup_steps", t.warmup_steps, "must be >= 0")
    _require(t.grad_clip > 0, "train.grad_clip", t.grad_clip, "must be > 0")
    _require(0.0 <= t.ema_decay <= 1.0, "train.ema_decay", t.ema_decay, "must be in [0, 1]")
    _require(t.log_every >= 1, "train.log_every", t.log_every, "must be >= 1")
    _require(t.ckpt_every >= 1, "train.ckpt_every", t.ckpt_every, "must be >= 1")
    _require(t.keep_checkpoints >= 1, "train.keep_checkpoints", t.keep_checkpoints, "must be >= 1")

    n = jax.device_count()
    _require(c.mesh.data == -1 or 1 <= c.mesh.data <= n, "mesh.data", c.mesh.data,
             f"must be -1 (all devices) or 1..{n} (devices JAX sees)")
    dp = n if c.mesh.data == -1 else c.mesh.data
    _require(t.batch_size % dp == 0, "train.batch_size", t.batch_size,
             f"must be divisible by the {dp} devices of the data axis")
    _require(t.batch_size % jax.process_count() == 0, "train.batch_size", t.batch_size,
             f"must be divisible by the {jax.process_count()} processes")

    _one_of(c, "sampler.name", sorted(SAMPLERS))
    _one_of(c, "weighting.name", sorted(WEIGHTINGS))
    try:
        SAMPLERS[c.sampler.name].validate(c)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    _one_of(c, "sample.method", METHODS)
    _require(c.sample.num >= 1, "sample.num", c.sample.num, "must be >= 1")
    _require(1 <= c.sample.ddim_steps <= c.diffusion.num_timesteps, "sample.ddim_steps", c.sample.ddim_steps,
             "must be in 1..config.diffusion.num_timesteps")
    _require(1 <= c.diagnostics.t_bins <= c.diffusion.num_timesteps, "diagnostics.t_bins", c.diagnostics.t_bins,
             "must be in 1..config.diffusion.num_timesteps")


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
