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


def lr_schedule(config):
    """Linear warm-up from 0 to config.train.lr over warmup_steps, then constant (DDPM)."""
    t = config.train
    if t.warmup_steps > 0:
        return optax.linear_schedule(0.0, t.lr, t.warmup_steps)
    return optax.constant_schedule(t.lr)


def make_optimizer(config) -> optax.GradientTransformation:
    """Adam on the warm-up schedule, after global-norm clipping."""
    t = config.train
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), optax.adam(lr_schedule(config), b1=t.b1, b2=t.b2))


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
