"""The one train-state pytree, its optimizer and its sharded initialisation (config.train: config/sections.py)."""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from data.base import example_shape


@flax.struct.dataclass
class TrainState:
    step: jnp.ndarray  # int32 scalar: number of updates done
    params: Any
    opt_state: Any
    ema_params: Any
    sampler_state: Any
    rng: jnp.ndarray  # uint32[2] base key; step keys are fold_in(rng, step)


def lr_schedule(train_cfg):
    """Linear warm-up to train_cfg.lr over warmup_steps, then constant: lr(step) = lr min(1, (step + 1) / warmup),
    as the method's reference code (PyTorch LambdaLR with (step + 1) / warmup), so that the first step already
    moves the model (a warm-up from 0 gave the learned sampler's first policy update a reward of exactly 0)."""
    lr, warmup = train_cfg.lr, train_cfg.warmup_steps
    if warmup > 0:
        return lambda step: lr * jnp.minimum(1.0, (step + 1) / warmup)
    return optax.constant_schedule(lr)


def ema_decay_at(train_cfg):
    """step -> the EMA decay of the update made at `step` (0, 1, ...). Without warm-up ema_decay itself (a Python
    float: the step is unchanged bit for bit). With train_cfg.ema_warmup, min(ema_decay, (1 + n) / (10 + n)) with
    n = step + 1 updates so far, the form of TensorFlow's ExponentialMovingAverage(num_updates) that
    CompVis/latent-diffusion's LitEma (use_num_upates=True, its default) and score_sde use: 2/11 = 0.18 at the first
    update, 0.9 after 80, 0.99 after 890, 0.999 from 8,990 on; the EMA then forgets the random initialisation
    within the first hundred steps instead of weighing it for ~1 / (1 - decay) steps."""
    d = train_cfg.ema_decay
    if train_cfg.get("ema_warmup", False):
        return lambda step: jnp.minimum(d, (2.0 + step) / (11.0 + step))
    return lambda step: d


def make_optimizer(train_cfg) -> optax.GradientTransformation:
    """Adam (AdamW with weight_decay > 0) on the warm-up schedule, after global-norm clipping (none when
    grad_clip is 0; pass config.train)."""
    c = train_cfg
    wd = c.get("weight_decay", 0.0)
    clip = optax.clip_by_global_norm(c.grad_clip) if c.grad_clip > 0 else optax.identity()
    if wd > 0:
        return optax.chain(clip, optax.adamw(lr_schedule(c), b1=c.b1, b2=c.b2, weight_decay=wd))
    return optax.chain(clip, optax.adam(lr_schedule(c), b1=c.b1, b2=c.b2))


def image_shape(data_cfg, batch: int):
    """[batch, H, W, C] of the dataset config.data describes ([batch, seq_len] for text: data.base.example_shape)."""
    return (batch, *example_shape(data_cfg))


def init_state(model, tx, sampler, key, batch_shape, process=None, weighting=None) -> TrainState:
    """Build the train state from a key (pure: jit it with out_shardings to initialise in place). batch_shape: one
    global batch's [B, H, W, C]. A process with parameters of its own (a learned noise schedule) adds them to the
    model's variables (process.init_params), from a key of their own; so does a learned loss weighting
    (weighting.init_params, weightings/uncertainty.py)."""
    k_model, k_sampler, k_rng = jax.random.split(key, 3)
    x = jnp.zeros(batch_shape, jnp.float32)
    t = jnp.zeros((x.shape[0],), jnp.int32)
    y = jnp.zeros((1,), jnp.int32) if model.num_classes else None
    params = model.init(k_model, x[:1], t[:1], y)
    if process is not None:
        params = process.init_params(jax.random.fold_in(key, 0x5C4ED), params)
    if weighting is not None and hasattr(weighting, "init_params"):
        params = weighting.init_params(jax.random.fold_in(key, 0x3E16), params)
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        ema_params=params,
        sampler_state=sampler.init(k_sampler, x),
        rng=k_rng,
    )
