"""Everything a run builds from its config before it touches a workdir: the mesh, the parts, the jitted train step,
the abstract state and its shardings; and the initial state. Used by the drivers (drivers/train.py,
drivers/evaluate.py), --mode=compile (aot.py) and notebooks; handed to the evaluators (evaluation/) and generation
(diffusion/generate.py), which take the network function from it (Setup.predict_fn) and import nothing of training/.

Functions that run more than once (sampling, the bound) are jitted once per shape and kept in `Setup.compiled`, so a
run's periodic evaluations and FID chunks reuse one compiled program (core/traces.py counts how often each was
traced).
"""

import dataclasses
import functools
from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

from config.validate import validate
from core.traces import TRACES
from data import DATASETS, dataset_classes
from diffusion import make_process
from models import make_model
from samplers import make_sampler
from training.mesh import batch_sharding, make_mesh, replicated, state_shardings
from training.state import image_shape, init_state, make_optimizer
from training.step import make_apply, make_train_step
from weightings import make_weighting


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Setup:
    """The parts a run builds from its config (`build`), named. The train step is made from them when first used:
    `make_step` the pure function, `step_for` the jitted program; `compiled` keeps the jitted functions (the steps,
    sampling, the bound), each made once."""

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
        """The pure step (state, batch) -> (state, metrics) of training/step.py, not jitted: periodic None decides
        the sampler's periodic update on the device, True / False makes one kind of step (Sampler.period). Each
        trace counts in TRACES[("step", periodic)]."""
        step = make_train_step(self, periodic)

        @functools.wraps(step)
        def traced(state, batch):
            TRACES[("step", periodic)] += 1
            return step(state, batch)

        return traced

    def step_for(self, step: int | None = None) -> Callable:
        """The jitted step (the state's shardings, state donated) that the loop runs at step `step`: for a sampler
        with a period, one program for the steps that do its periodic update and one for the others (each compiled
        once, when first used), so that most steps carry neither the update's lax.cond nor its scratch memory. With
        step None, or a sampler without a period, the one program that decides the update on the device."""
        period = self.sampler.period()
        periodic = None if step is None or period is None else step % period == 0
        return self.cached(("step", periodic), lambda: self._jit(self.make_step(periodic)))

    def _jit(self, fn):
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

    def batch_shape(self, batch: int):
        return image_shape(self.config.data, batch)

    def predict_fn(self, dtype=None) -> Callable:
        """The network function apply(params, x, t, dropout_key=None, y=None) (training/step.py make_apply: eval
        mode without a dropout key) at `dtype` (None: the model's own): what sampling and the evaluators call."""
        return make_apply(self.model if dtype is None else self.model.clone(dtype=dtype))

    @functools.cached_property
    def autoencoder(self):
        """The first stage of a latent model (latent/), through which samples are decoded; None for pixels.
        Loaded when first used (a compile-only run needs no weights)."""
        return make_first_stage(self.config)

    @functools.cached_property
    def decoder_fingerprint(self) -> str | None:
        """The content hash of the first stage that decodes samples (its weights and latent scaling): part of what
        a latent model's FID was measured with. None for pixels."""
        from core import fingerprint

        ae = self.autoencoder
        if ae is None:
            return None
        return fingerprint.of_arrays(
            *jax.tree.leaves(ae.params), np.float64(ae.scaling_factor), np.float64(ae.shift_factor)
        )

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
