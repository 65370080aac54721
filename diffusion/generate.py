"""Samples from a run's parameters: the network function with classifier-free guidance (guided_apply), the jitted
sampler of a shape (sampling_fn: decoded through the autoencoder for a latent model, kept in Setup.compiled so that
periodic evaluations and FID chunks reuse one program) and `generate`, the collective every process calls. Used by
the training loop's sample grid (drivers/train.py), --mode=eval, the periodic evaluation (evaluation/) and
notebooks. `setup` is the run's training.setup.Setup, handed in by the caller: its process, network function
(predict_fn), mesh and shardings."""

import jax
import jax.numpy as jnp
import numpy as np

from core.traces import TRACES


def guided_apply(apply, process, params, y, scale: float, num_classes: int):
    """The network function (x, t) -> output that sampling uses. Unconditional model: apply. Class-conditional,
    classifier-free guidance (Ho & Salimans 2022) with labels y: scale 1 is the conditional network alone (one
    pass, exactly), scale 0 the unconditional one (the null class), otherwise one pass over [x; x] with
    [y; null] and process.guide(out_cond, out_uncond, scale) = out_uncond + scale (out_cond - out_uncond) on the
    mean part."""
    if not num_classes:
        return lambda x, t: apply(params, x, t)
    if scale == 1.0:
        return lambda x, t: apply(params, x, t, None, y)
    null = jnp.full_like(y, num_classes)
    if scale == 0.0:
        return lambda x, t: apply(params, x, t, None, null)

    def pair(a, b):
        """[B, ...] x2 -> [2B, ...] interleaved (a_0, b_0, a_1, ...): each row's pair stays on its device."""
        return jnp.stack([a, b], axis=1).reshape((2 * a.shape[0],) + a.shape[1:])

    def fn(x, t):
        out = apply(params, pair(x, x), pair(t, t), None, pair(y, null))
        out = out.reshape((x.shape[0], 2) + out.shape[1:])
        return process.guide(out[:, 0], out[:, 1], scale)

    return fn


def sampling_fn(setup, method: str, steps: int, shape, guidance: float = 1.0):
    """fn(params, key, y) -> uint8 samples of `shape` (decoded through the autoencoder for a latent model),
    sharded over the data axis; y: [N] labels for a class-conditional model, else None. Jitted once per (method,
    steps, shape, guidance)."""
    steps = steps if setup.process.uses_steps(method) else 0
    num_classes = setup.num_classes
    guidance = float(guidance) if num_classes else 1.0
    name = ("sample", method, steps, shape, guidance)

    def make():
        apply = setup.predict_fn()
        ae = setup.autoencoder  # loaded here, outside the trace; its weights are an argument, not constants

        def constrain(x):
            return jax.lax.with_sharding_constraint(x, setup.batch_sharding)

        def sample_u8(params, key, y, ae_params):
            TRACES[name] += 1
            fn = guided_apply(apply, setup.process, params, y, guidance, num_classes)
            process = setup.process.bind(params)
            x = process.sample(fn, key, shape, method, steps, constrain=constrain, clip=ae is None)
            if ae is not None:
                x = ae.decode_fn(ae_params, x)
            return process.data_out(x)

        jitted = jax.jit(sample_u8, out_shardings=setup.batch_sharding)
        return lambda params, key, y: jitted(params, key, y, None if ae is None else ae.params)

    return setup.cached(name, make)


def sample_labels(num_classes: int, num: int, offset: int = 0):
    """The classes of `num` samples of a class-conditional model: sample i gets class (offset + i) mod K, so grids
    show the classes in order and every FID set is balanced; None for an unconditional model."""
    if not num_classes:
        return None
    return ((np.arange(num) + offset) % num_classes).astype(np.int32)


def generate(
    setup, params, key, num: int, method: str = None, steps: int = None, guidance: float = None, offset: int = 0
) -> np.ndarray:
    """num samples from `params` as uint8 [num, H, W, C] (pixels: a latent model's samples are decoded), on every
    process (a collective: all processes call it). The batch is sharded over the data axis (num padded up to a
    multiple of its size). method / steps / guidance default to config.sample.method / steps /
    guidance_scale; a class-conditional model draws class (offset + i) mod K for sample i (sample_labels)."""
    from jax.experimental import multihost_utils

    c = setup.config
    method = method or c.sample.method
    steps = steps or c.sample.steps
    guidance = c.sample.guidance_scale if guidance is None else guidance
    n_dev = setup.mesh.shape["data"]
    padded = -(-num // n_dev) * n_dev
    shape = setup.batch_shape(padded)
    y = sample_labels(setup.num_classes, padded, offset)
    if y is not None:
        P, p = jax.process_count(), jax.process_index()
        y = jax.make_array_from_process_local_data(setup.batch_sharding, y[p * padded // P : (p + 1) * padded // P])
    x = sampling_fn(setup, method, steps, shape, guidance)(params, key, y)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))[:num]
