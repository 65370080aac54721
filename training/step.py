"""The one pure train step: (state, uint8 images) -> (state, metrics).

Samples timesteps from the sampler, takes one Adam step of the diffusion model on the weighted MSE, updates the EMA,
then lets the sampler update its own state from what the step computed (the learned sampler runs its probes and
policy update there, under lax.cond). Everything is one XLA computation; jit it once with shardings (train.py).
"""

import jax
import jax.numpy as jnp
import optax

from core.fields import Int, all_mutable
from samplers.base import StepContext
from training import rows
from training.state import TrainState, ema_decay_at, lr_schedule

DIAGNOSTICS_FIELDS = all_mutable(
    dict(
        t_bins=Int(50, 1, "T"),  # bins of the timestep histogram and the per-timestep loss
    )
)


def to_float(images_u8):
    """uint8 [0, 255] -> float32 [-1, 1]; float data (pre-encoded latents) passes unchanged."""
    if jnp.issubdtype(images_u8.dtype, jnp.floating):
        return images_u8.astype(jnp.float32)
    return images_u8.astype(jnp.float32) / 127.5 - 1.0


def split_batch(batch):
    """(data [B, ...], labels [B] int32 or None) of a batch: an array, or {"image": ..., "label": ...}."""
    if isinstance(batch, dict):
        return batch["image"], batch["label"]
    return batch, None


def drop_labels(key, y, num_classes: int, rate: float):
    """Classifier-free guidance's label dropout: each label replaced by the null class (num_classes) with
    probability `rate`; None passes."""
    if y is None or rate == 0:
        return y
    return jnp.where(jax.random.uniform(key, y.shape) < rate, num_classes, y)


def make_apply(model):
    """apply(params, x, t, dropout_key=None, y=None): the network in eval mode, or in train mode with dropout."""

    def apply(params, x, t, dropout_key=None, y=None):
        if dropout_key is None:
            return model.apply(params, x, t, y, train=False)
        return model.apply(params, x, t, y, train=True, rngs={"dropout": dropout_key})

    return apply


def make_rows_fn(model, process, num_shards: int = 1, constrain=rows.same, weighting=None):
    """rows_fn(params, x0 [R,...], t [R], noise [R,...], *, y=None, dropout_key=None, kl_only=False, loss=False,
    rows_per_device=0) -> [R] bits/dim of independent rows (y [R]: their labels for a class-conditional model),
    or with loss=True each row's training objective w(t) * MSE + extra (w: `weighting`),
    spread over `num_shards` devices (constrain(x, axis) shards x over the data axis) in chunks of at most
    rows_per_device rows per device (training/rows.py); chunk i runs with dropout key fold_in(dropout_key, i). The
    network runs in float32 whatever config.model.dtype says: the bound terms, and the learned sampler's reward (a
    small difference of two such terms), would be biased by bfloat16 rounding. The parameters are the same."""
    apply = make_apply(model.clone(dtype=jnp.float32))

    def rows_fn(params, x0, t, noise, *, y=None, dropout_key=None, kl_only=False, loss=False, rows_per_device=0):
        def chunk_terms(chunk, index):
            key = None if dropout_key is None else jax.random.fold_in(dropout_key, index)
            yc = chunk[3] if len(chunk) > 3 else None
            fn = lambda x, tt: apply(params, x, tt, key, yc)
            bound = process.bind(params)
            if loss:
                mse, extra = bound.example_losses(fn, *chunk[:3])
                return weighting.loss(params, chunk[1], mse) + extra
            return bound.row_terms(fn, *chunk[:3], kl_only=kl_only)

        data = (x0, t, noise) if y is None else (x0, t, noise, y)
        return rows.map_rows(chunk_terms, data, num_shards, rows_per_device, constrain)

    return rows_fn


def make_train_step(
    config, model, process, sampler, weighting, tx, num_shards: int = 1, constrain=rows.same, periodic=None
):
    """The pure step for the config's train and diagnostics sections and the given parts; num_shards and
    constrain(x, axis) describe the data axis (setup.build) for the rows the sampler probes. periodic: None for a
    step that decides on the device whether to do the sampler's periodic update; True / False for a step compiled
    for one kind (Sampler.period)."""
    nbins = config.diagnostics.t_bins
    decay_at = ema_decay_at(config.train)
    apply = make_apply(model)
    rows_fn = make_rows_fn(model, process, num_shards, constrain, weighting)
    lr_at = lr_schedule(config.train)

    num_classes = getattr(model, "num_classes", 0)
    label_rate = config.model.label_dropout if num_classes else 0.0

    def example_losses(params, x0, t, noise, dropout_key, y=None):
        """Per-example MSE of the model's target and the process's extra term (the learned variance's
        lambda * L_vlb with the mean frozen; 0 for fixed variances): ([B], [B])."""
        bound = process.bind(params)  # a learned noise schedule reads its parameters
        return bound.example_losses(lambda xt, tt: apply(params, xt, tt, dropout_key, y), x0, t, noise)

    def example_loss_fn(params, x0, t, noise, dropout_key, y=None):
        """Each example's objective before any importance weight, w(t) * MSE + extra: [B] (a learned weighting's
        own form, weightings/uncertainty.py)."""
        mse, extra = example_losses(params, x0, t, noise, dropout_key, y)
        return weighting.loss(params, t, mse) + extra

    def train_step(state: TrainState, batch):
        data, labels = split_batch(batch)
        x0 = to_float(data)
        key = jax.random.fold_in(state.rng, state.step)
        k_t, k_noise, k_drop, k_sampler = jax.random.split(key, 4)
        t, w_sampler, aux = sampler.sample(state.sampler_state, k_t, x0)
        noise = jax.random.normal(k_noise, x0.shape, jnp.float32)
        # label dropout from its own stream (fold_in), so that unconditional runs keep their random numbers
        y = drop_labels(jax.random.fold_in(key, 0xC1A55), labels, num_classes, label_rate) if num_classes else None

        def loss_fn(params):
            mse, extra = example_losses(params, x0, t, noise, k_drop, y)
            objective = weighting.loss(params, t, mse) + extra  # w(t) MSE + extra (a learned weighting's own form)
            return jnp.mean(w_sampler * objective), (mse, objective)

        (loss, (mse, objective)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        decay = decay_at(state.step)
        ema = jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, state.ema_params, params)

        ctx = StepContext(
            step=state.step,
            key=k_sampler,
            x0=x0,
            y=labels if num_classes else None,
            t=t,
            aux=aux,
            losses=objective,
            params_before=state.params,
            params_after=params,
            rows_fn=rows_fn,
            example_loss_fn=example_loss_fn,
            is_periodic=periodic,
            mse=mse,
            loss_weight=weighting(t),
        )
        sampler_state, sampler_metrics = sampler.update(state.sampler_state, ctx)

        grad_norm = optax.tree.norm(grads)
        # Parameters can be finite yet so large that the next forward pass overflows (an absurd learning rate):
        # a norm beyond float32 catches them at the step that made them, before they are checkpointed.
        param_norm = optax.tree.norm(params)
        bins = process.time.bins(t, nbins)
        metrics = dict(
            loss=loss,
            mse=jnp.mean(mse),
            grad_norm=grad_norm,
            lr=lr_at(state.step),
            param_norm=param_norm,
            finite_loss=jnp.isfinite(loss),
            finite_grads=jnp.isfinite(grad_norm),
            finite_params=jnp.isfinite(param_norm),
            finite_sampler=sampler.check_finite(sampler_state, aux),
            t_hist=jnp.zeros((nbins,), jnp.int32).at[bins].add(1),
            t_loss_sum=jnp.zeros((nbins,), jnp.float32).at[bins].add(mse),
            **{"sampler/" + k: v for k, v in sampler_metrics.items()},
        )
        new_state = TrainState(
            step=state.step + 1,
            params=params,
            opt_state=opt_state,
            ema_params=ema,
            sampler_state=sampler_state,
            rng=state.rng,
        )
        return new_state, metrics

    return train_step
