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

from diffusion import make_process
from models import make_model
from samplers import make_sampler
from training.mesh import DATA, batch_sharding, make_mesh, replicated, row_constraint, state_shardings
from training.state import image_shape, init_state, make_optimizer
from training.step import make_apply, make_train_step
from training.validate import validate
from weightings import make_weighting

TRACES: collections.Counter = collections.Counter()  # name -> times traced (a Python side effect of tracing)


@dataclasses.dataclass
class Setup:
    config: Any
    mesh: Any
    process: Any
    model: Any
    sampler: Any
    weighting: Callable
    tx: Any
    train_step: Callable  # the raw pure function (decides the sampler's periodic update on the device)
    step_fn: Callable  # jitted with shardings, state donated
    make_step: Callable  # make_step(periodic) -> a raw step compiled for one kind of step (Sampler.period)
    abstract_state: Any
    state_shardings: Any
    batch_sharding: Any
    compiled: Dict[Any, Callable] = dataclasses.field(default_factory=dict)  # jitted helpers, built once each

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


def build(config) -> Setup:
    """Validate the config and build everything that does not depend on the workdir. Compiles nothing yet."""
    validate(config)
    c = config
    mesh = make_mesh(c.mesh)
    process = make_process(c.diffusion)
    model = make_model(c.model)
    sampler = make_sampler(c.sampler, process, c.train.batch_size)
    weighting = make_weighting(c.weighting, process)
    tx = make_optimizer(c.train)
    make_step = functools.partial(
        make_train_step, c, model, process, sampler, weighting, tx, mesh.shape[DATA], row_constraint(mesh)
    )
    raw = make_step(None)
    shape = image_shape(c.data, c.train.batch_size)
    abstract = jax.eval_shape(lambda k: init_state(model, tx, sampler, k, shape), jax.random.PRNGKey(0))
    state_sh = state_shardings(abstract, mesh, c.mesh.shard_params)
    setup = Setup(
        c, mesh, process, model, sampler, weighting, tx, raw, None, make_step, abstract, state_sh, batch_sharding(mesh)
    )
    setup.step_fn = setup.jit_step(raw)
    return setup


def initial_state(setup: Setup):
    c = setup.config
    shape = setup.batch_shape(c.train.batch_size)
    init = jax.jit(
        lambda k: init_state(setup.model, setup.tx, setup.sampler, k, shape), out_shardings=setup.state_shardings
    )
    return init(jax.random.PRNGKey(c.seed))


def to_u8(x):
    """[-1, 1] -> uint8 [0, 255]."""
    return jnp.round((x + 1.0) * 127.5).clip(0, 255).astype(jnp.uint8)


def sampling_fn(setup: Setup, method: str, steps: int, shape):
    """fn(params, key) -> uint8 samples of `shape`, sharded over the data axis; jitted once per (method, steps,
    shape)."""
    steps = steps if method == "ddim" else 0

    def make():
        apply = make_apply(setup.model)

        def constrain(x):
            return jax.lax.with_sharding_constraint(x, setup.batch_sharding)

        def sample_u8(params, key):
            TRACES[("sample", method, steps, shape)] += 1
            x = setup.process.sample(lambda x, t: apply(params, x, t), key, shape, method, steps, constrain=constrain)
            return to_u8(x)

        return jax.jit(sample_u8, out_shardings=setup.batch_sharding)

    return setup.cached(("sample", method, steps, shape), make)


def generate(setup: Setup, params, key, num: int, method: str = None, steps: int = None) -> np.ndarray:
    """num samples from `params` as uint8 [num, H, W, C], on every process (a collective: all processes call it).
    The batch is sharded over the data axis (num padded up to a multiple of its size). method/steps default to
    config.sample.method / config.sample.ddim_steps."""
    from jax.experimental import multihost_utils

    c = setup.config
    method = method or c.sample.method
    steps = steps or c.sample.ddim_steps
    n_dev = setup.mesh.shape["data"]
    shape = setup.batch_shape(-(-num // n_dev) * n_dev)
    x = sampling_fn(setup, method, steps, shape)(params, key)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))[:num]
