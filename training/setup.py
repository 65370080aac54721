"""Everything a run builds from its config before it touches a workdir: the mesh, the parts, the jitted train step,
the abstract state and its shardings; the initial state; and the sample generator. Used by the training loop
(train.py), --mode=eval (evaluate.py), --mode=compile (aot.py) and notebooks.

Functions that run more than once (sampling, the bound) are jitted once per shape and kept in `Setup.compiled`, so a
run's periodic evaluations and FID chunks reuse one compiled program. TRACES counts how often each was traced.
"""

import collections
import dataclasses
import functools
from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

from data import DATASETS, dataset_classes
from diffusion import make_process
from models import make_model
from samplers import make_sampler
from training.mesh import batch_sharding, make_mesh, replicated, state_shardings
from training.state import image_shape, init_state, make_optimizer
from training.step import make_apply, make_train_step
from training.validate import validate
from weightings import make_weighting

TRACES: collections.Counter = collections.Counter()  # name -> times traced (a Python side effect of tracing)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Setup:
    """The parts a run builds from its config (`build`), named. The train step is made from them when first used;
    `compiled` keeps the jitted helpers (sampling, the bound), each made once."""

    config: Any
    mesh: Any
    process: Any
    model: Any
    sampler: Any
    weighting: Callable
    tx: Any
    abstract_state: Any
    state_shardings: Any
    batch_sharding: Any
    compiled: Dict[Any, Callable] = dataclasses.field(default_factory=dict)  # jitted helpers, built once each

    def make_step(self, periodic=None) -> Callable:
        """The raw pure step (training/step.py): periodic None decides the sampler's periodic update on the device,
        True / False compiles one kind of step (Sampler.period)."""
        return make_train_step(self, periodic)

    @functools.cached_property
    def train_step(self) -> Callable:
        """The raw pure step that decides the sampler's periodic update on the device."""
        return self.make_step(None)

    @functools.cached_property
    def step_fn(self) -> Callable:
        """train_step jitted with shardings, state donated."""
        return self.jit_step(self.train_step)

    def jit_step(self, fn):
        """jit a (state, batch) -> (state, metrics) function with the train step's shardings, state donated."""
        return jax.jit(
            fn,
            in_shardings=(self.state_shardings, self.batch_sharding),
            out_shardings=(self.state_shardings, replicated(self.mesh)),
            donate_argnums=(0,),
        )

    def cached(self, key, make: Callable[[], Callable]) -> Callable:
        """The jitted function stored under `key`, made by make() the first time."""
        if key not in self.compiled:
            self.compiled[key] = make()
        return self.compiled[key]

    def step_for(self, step: int) -> Callable:
        """The jitted step that the loop runs at step `step`: for a sampler with a period, one program for the
        steps that do its periodic update and one for the others (each compiled once, when first used), so that
        most steps carry neither the update's lax.cond nor its scratch memory; else step_fn."""
        period = self.sampler.period()
        if period is None:
            return self.step_fn
        periodic = step % period == 0
        return self.cached(("step", periodic), lambda: self.jit_step(self.make_step(periodic)))

    def batch_shape(self, batch: int):
        return image_shape(self.config.data, batch)

    @functools.cached_property
    def autoencoder(self):
        """The first stage of a latent model (latent/), through which samples are decoded; None for pixels.
        Loaded when first used (a compile-only run needs no weights)."""
        return make_first_stage(self.config)

    @property
    def latent(self) -> bool:
        """Whether the model is trained on a first stage's latents (data/latents.py)."""
        return hasattr(DATASETS[self.config.data.name], "autoencoder_path")

    @property
    def num_classes(self) -> int:
        """The classes a class-conditional model is trained on (its null class not counted); 0: unconditional."""
        return self.model.num_classes

    @property
    def conditional(self) -> bool:
        return bool(self.num_classes)

    def abstract_batch(self, batch: int):
        """The train step's batch as shapes (sharded): data [B, H, W, C] (uint8 images or float32 latents), with
        int32 labels [B] as {"image", "label"} for a class-conditional model."""
        dtype = getattr(DATASETS[self.config.data.name], "dtype", "uint8")
        data = jax.ShapeDtypeStruct(self.batch_shape(batch), jnp.dtype(dtype), sharding=self.batch_sharding)
        if not self.conditional:
            return data
        return dict(image=data, label=jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=self.batch_sharding))

    def example_batch(self, batch: int, seed: int = 0):
        """A random batch of abstract_batch's structure, on the devices (benchmarks, tests)."""
        rng = np.random.default_rng(seed)

        def make(s):
            if s.dtype == jnp.uint8:
                a = rng.integers(0, 256, s.shape, dtype=np.uint8)
            elif s.dtype == jnp.int32:
                a = rng.integers(0, max(1, self.num_classes), s.shape).astype(np.int32)
            else:
                a = rng.standard_normal(s.shape).astype(s.dtype)
            return jax.device_put(a, self.batch_sharding)

        return jax.tree.map(make, self.abstract_batch(batch))


def build(config) -> Setup:
    """Validate the config and build everything that does not depend on the workdir. Compiles nothing yet."""
    validate(config)
    c = config
    mesh = make_mesh(c.mesh)
    process = make_process(c.diffusion)
    model = make_model(c.model, num_classes=dataset_classes(c.data), out_channels=process.out_channels(c.data.channels))
    sampler = make_sampler(c.sampler, process, c.train.batch_size)
    weighting = make_weighting(c.weighting, process)
    tx = make_optimizer(c.train)
    shape = image_shape(c.data, c.train.batch_size)
    abstract = jax.eval_shape(
        lambda k: init_state(model, tx, sampler, k, shape, process, weighting), jax.random.PRNGKey(0)
    )
    return Setup(
        config=c,
        mesh=mesh,
        process=process,
        model=model,
        sampler=sampler,
        weighting=weighting,
        tx=tx,
        abstract_state=abstract,
        state_shardings=state_shardings(abstract, mesh, c.mesh.shard_params),
        batch_sharding=batch_sharding(mesh),
    )


def make_first_stage(config):
    """The autoencoder that decodes a latent dataset's samples (data/latents.py), or None for pixels."""
    part = DATASETS[config.data.name]
    if not hasattr(part, "autoencoder_path"):
        return None
    from data.embedded_autoencoder import resolve
    from latent import make_autoencoder

    return make_autoencoder(resolve(part.autoencoder_path(config.data), config.eval.fid.classifier_cache))


def initial_state(setup: Setup):
    c = setup.config
    shape = setup.batch_shape(c.train.batch_size)
    init = jax.jit(
        lambda k: init_state(setup.model, setup.tx, setup.sampler, k, shape, setup.process, setup.weighting),
        out_shardings=setup.state_shardings,
    )
    return init(jax.random.PRNGKey(c.seed))


def to_u8(x):
    """[-1, 1] -> uint8 [0, 255]."""
    return jnp.round((x + 1.0) * 127.5).clip(0, 255).astype(jnp.uint8)


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


def sampling_fn(setup: Setup, method: str, steps: int, shape, guidance: float = 1.0):
    """fn(params, key, y) -> uint8 samples of `shape` (decoded through the autoencoder for a latent model),
    sharded over the data axis; y: [N] labels for a class-conditional model, else None. Jitted once per (method,
    steps, shape, guidance)."""
    steps = steps if setup.process.uses_steps(method) else 0
    num_classes = setup.num_classes
    guidance = float(guidance) if num_classes else 1.0
    name = ("sample", method, steps, shape, guidance)

    def make():
        apply = make_apply(setup.model)
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
            return to_u8(x)

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
    setup: Setup, params, key, num: int, method: str = None, steps: int = None, guidance: float = None, offset: int = 0
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
