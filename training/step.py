"""The one pure train step: (state, uint8 images) -> (state, metrics).

Samples timesteps from the sampler, takes one Adam step of the diffusion model on the weighted MSE, updates the EMA,
then lets the sampler update its own state from what the step computed (the learned sampler runs its probes and
policy update there, under lax.cond). Everything is one XLA computation; jit it once with shardings (setup.py).
"""

import jax
import jax.numpy as jnp
import optax

from diffusion.base import to_float  # noqa: F401 (the pixels' conversion, importable from here)
from samplers.base import StepContext
from training import rows
from training.mesh import DATA, row_constraint
from training.state import TrainState, ema_decay_at, lr_schedule


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


# What rows_fn computes per row: the bound's own term ("bound": on a chain, the discretised decoder at t = 0), the
# reference's reward term ("kl": on a chain, the Gaussian KL at every step, t = 0 included; in continuous time the
# same as "bound"), or the training objective w(t) MSE + extra ("loss").
ROW_KINDS = ("bound", "kl", "loss")


def make_objective(apply, process, weighting):
    """objective(params, x0 [B,...], t [B], noise [B,...], dropout_key=None, y=None) -> (each example's training
    objective before any importance weight, w(t) MSE + extra [B], and its MSE [B]): the one definition of the loss
    that the train step, the samplers' probes (StepContext.objective, rows_fn(kind="loss")) and the benchmarks use.
    apply: make_apply's network function; the process is bound to params first (a learned schedule reads its
    parameters); w is `weighting`'s (a learned weighting's own form, weightings/uncertainty.py)."""

    def objective(params, x0, t, noise, dropout_key=None, y=None):
        bound = process.bind(params)
        mse, extra = bound.example_losses(lambda xt, tt: apply(params, xt, tt, dropout_key, y), x0, t, noise)
        return weighting.loss(params, t, mse) + extra, mse

    return objective


def make_rows_fn(model, process, *, weighting=None, num_shards: int = 1, constrain=rows.same):
    """rows_fn(params, x0 [R,...], t [R], noise [R,...], *, kind="bound", y=None, dropout_key=None,
    rows_per_device=0) -> [R] of independent rows (y [R]: their labels for a class-conditional model): bits/dim of
    the bound's term of `kind` (ROW_KINDS), or with kind="loss" each row's training objective (make_objective, with
    `weighting`), spread over `num_shards` devices (constrain(x, axis) shards x over the data axis) in chunks of at
    most rows_per_device rows per device (training/rows.py); chunk i runs with dropout key fold_in(dropout_key, i).
    The network runs in float32 whatever config.model.dtype says: the bound terms, and the learned sampler's reward
    (a small difference of two such terms), would be biased by bfloat16 rounding. The parameters are the same."""
    apply = make_apply(model.clone(dtype=jnp.float32))
    objective = make_objective(apply, process, weighting)

    def rows_fn(params, x0, t, noise, *, kind="bound", y=None, dropout_key=None, rows_per_device=0):
        if kind not in ROW_KINDS:
            raise ValueError(f"rows_fn: kind={kind!r} is none of {ROW_KINDS}")

        def chunk_terms(chunk, index):
            key = None if dropout_key is None else jax.random.fold_in(dropout_key, index)
            x, tt, n, yc = (*chunk, None)[:4]
            if kind == "loss":
                return objective(params, x, tt, n, key, yc)[0]
            fn = lambda xt, s: apply(params, xt, s, key, yc)
            return process.bind(params).row_terms(fn, x, tt, n, kind=kind)

        data = (x0, t, noise) if y is None else (x0, t, noise, y)
        return rows.map_rows(chunk_terms, data, num_shards, rows_per_device, constrain)

    return rows_fn


def make_train_step(setup, periodic=None):
    """The pure step of a setup (training/setup.py Setup: its config's train and diagnostics sections, its model,
    process, sampler, weighting, optimizer and mesh, whose data axis spreads the rows the sampler probes).
    periodic: None for a step that decides on the device whether to do the sampler's periodic update; True / False
    for a step compiled for one kind (Sampler.period)."""
    config, model, process, sampler = setup.config, setup.model, setup.process, setup.sampler
    weighting = setup.weighting
    nbins = config.diagnostics.t_bins
    decay_at = ema_decay_at(config.train)
    objective = make_objective(make_apply(model), process, weighting)
    rows_fn = make_rows_fn(
        model, process, weighting=weighting, num_shards=setup.mesh.shape[DATA], constrain=row_constraint(setup.mesh)
    )
    lr_at = lr_schedule(config.train)

    num_classes = model.num_classes
    label_rate = config.model.label_dropout if num_classes else 0.0

    def train_step(state: TrainState, batch):
        data, labels = split_batch(batch)
        x0 = process.data_in(data)
        key = jax.random.fold_in(state.rng, state.step)
        k_t, k_noise, k_drop, k_sampler = jax.random.split(key, 4)
        t, w_sampler, aux = sampler.sample(state.sampler_state, k_t, x0)
        noise = process.draw_noise(k_noise, x0)
        # label dropout from its own stream (fold_in), so that unconditional runs keep their random numbers
        y = drop_labels(jax.random.fold_in(key, 0xC1A55), labels, num_classes, label_rate) if num_classes else None

        def loss_fn(params):
            losses, mse = objective(params, x0, t, noise, k_drop, y)
            return jnp.mean(w_sampler * losses), (mse, losses)

        (loss, (mse, losses)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = setup.tx.update(grads, state.opt_state, state.params)
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
            losses=losses,
            params_before=state.params,
            params_after=params,
            rows_fn=rows_fn,
            objective=objective,
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
