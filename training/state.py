"""The one train-state pytree, its optimizer and its sharded initialisation."""
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from models import UNet


@flax.struct.dataclass
class TrainState:
    step: jnp.ndarray  # int32 scalar: number of updates done
    params: Any
    opt_state: Any
    ema_params: Any
    sampler_state: Any
    rng: jnp.ndarray  # uint32[2] base key; step keys are fold_in(rng, step)


def make_model(config) -> UNet:
    m = config.model
    return UNet(ch=m.ch, ch_mult=tuple(m.ch_mult), num_res_blocks=m.num_res_blocks,
                attn_resolutions=tuple(m.attn_resolutions), dropout=m.dropout, num_groups=m.num_groups,
                dtype=jnp.dtype(m.dtype))


def make_optimizer(config) -> optax.GradientTransformation:
    """Adam with linear warm-up to the constant lr and global-norm clipping (DDPM)."""
    t = config.train
    lr = optax.linear_schedule(0.0, t.lr, max(t.warmup_steps, 1)) if t.warmup_steps > 0 else t.lr
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), optax.adam(lr, b1=t.b1, b2=t.b2))


def learning_rate(config, step):
    t = config.train
    return t.lr * jnp.minimum(1.0, step / max(t.warmup_steps, 1)) if t.warmup_steps > 0 else jnp.asarray(t.lr)


def image_shape(config, batch: int):
    return (batch, config.data.image_size, config.data.image_size, config.data.channels)


def init_state(config, model, tx, sampler, key) -> TrainState:
    """Build the train state from a key (pure: jit it with out_shardings to initialise in place)."""
    k_model, k_sampler, k_rng = jax.random.split(key, 3)
    x = jnp.zeros(image_shape(config, config.train.batch_size), jnp.float32)
    t = jnp.zeros((x.shape[0],), jnp.int32)
    params = model.init(k_model, x[:1], t[:1])
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      ema_params=params, sampler_state=sampler.init(k_sampler, x), rng=k_rng)
