"""The timestep-sampler contract and registry.

A sampler is one module: a Sampler subclass with a `name`, its own config fields (`FIELDS`, see config/registry.py)
and `@SAMPLERS.register`. Its constructor receives its own sub-config (config.sampler.<name>), the diffusion process
(whose time domain, process.time, answers what the sampler asks about time: diffusion/time.py) and the global batch
size, never the whole config.

A sampler turns a sampler state (a pytree carried in the train state) into timesteps and per-example loss weights,
and updates that state from what the train step computed. Every method is traced inside the one jitted train step,
so it must be pure and shape-stable; branching on traced values uses lax.cond.

    state = sampler.init(key, x0)                     # x0: one global batch of images, for shapes only
    t, weights, aux = sampler.sample(state, key, x0)  # t: [B] int32 in 0..T-1 (continuous: float32 in [0, 1])
    state, metrics = sampler.update(state, ctx)       # ctx: StepContext of this step

`weights` multiply the per-example loss (importance weights; 1 for samplers that deliberately re-weight the
objective). They are separate from the loss weighting (weightings/), which depends on t only.
"""

import dataclasses
import functools
from typing import Any, Callable, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from config.registry import DISCRETE, GAUSSIAN, INVERTIBLE, NESTED, Need, Registry
from diffusion.time import cdf_of, inverse_cdf

SAMPLERS = Registry("sampler", NESTED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepContext:
    """What one train step hands to `Sampler.update` (all arrays are global, sharded over the data axis).

    rows_fn(params, x0 [R, ...], t [R], noise [R, ...], *, kind="bound", y=None, dropout_key=None,
    rows_per_device=0) -> [R] computes, for independent rows (image, timestep, noise; with y [R] their labels,
    which a class-conditional model needs: pass ctx.y's entries of the rows' images) and the diffusion model's
    `params`, the bound's terms in bits/dim (kind "bound", or "kl": on a chain the Gaussian KL at t = 0 too) or the
    training objective (kind "loss"; training/step.py ROW_KINDS), in float32, spread over the data axis and run in
    chunks of at most rows_per_device rows per device (training/rows.py); with a dropout key the network runs in
    train mode, each chunk with masks of its own.
    losses [B] are each example's objective before the sampler's importance weight: w(t) * MSE (plus the learned
    variance's term), with w the loss weighting. objective(params, x0 [N,...], t [N], noise [N,...], dropout_key,
    y=None) -> (objective [N], MSE [N]) is the train step's own definition of it (training/step.py make_objective;
    train mode with a dropout key), for samplers that need gradients of single examples.
    """

    step: jnp.ndarray
    key: jnp.ndarray
    x0: jnp.ndarray
    t: jnp.ndarray
    aux: Dict[str, jnp.ndarray]
    losses: jnp.ndarray
    params_before: Any
    params_after: Any
    rows_fn: Callable[..., jnp.ndarray]
    objective: Callable[..., Tuple[jnp.ndarray, jnp.ndarray]] = None
    # Whether this step does the sampler's periodic work (Sampler.period): None decides on the device
    # (step % period == 0, under lax.cond); True / False when the step was compiled for one kind of step only.
    is_periodic: bool | None = None
    y: jnp.ndarray | None = None  # the batch's labels for a class-conditional model (not dropped), else None
    # each example's MSE of the network's target [B] (unweighted), and the fixed loss weighting's factor w(t) [B]
    # (1 for a learned weighting: its own terms are in `losses` only); w(t) mse is never negative
    mse: jnp.ndarray | None = None
    loss_weight: jnp.ndarray | None = None


class Sampler:
    """Base class: stateless uniform behaviour for update; subclasses override what they need."""

    name = "base"
    FIELDS: Dict[str, Any] = {}
    # Whether the sampler has a meaning in continuous time (process.time: t float32 in [0, 1]), whether it maps
    # noise levels to times through the process's inverses (diffusion.base.NoiseLevel), and whether its formula is
    # one of a Gaussian path (EDM's sigma, the x0-MSE); `needs` turns them into what it asks of the process, which
    # validation checks against what the process offers (one line when it lacks one).
    continuous = False
    inverts = False
    gaussian = False

    @classmethod
    def needs(cls, cfg) -> list:
        """What this sampler, with its own sub-config `cfg`, needs of the process: [config.registry.Need]."""
        out = [] if cls.continuous else [Need(DISCRETE)]
        if cls.inverts:
            out.append(Need(INVERTIBLE))
        if cls.gaussian:
            out.append(Need(GAUSSIAN))
        return out

    def __init__(self, cfg, process, batch_size: int):
        self.cfg = cfg  # this sampler's own sub-config
        self.process = process
        self.batch_size = batch_size
        self.time = process.time  # the time domain (diffusion/time.py)
        self.T = process.time.size  # T timesteps, or a continuous process's grid

    def init(self, key, x0) -> Any:
        return {}

    def sample(self, state, key, x0) -> Tuple[jnp.ndarray, jnp.ndarray, Dict[str, jnp.ndarray]]:
        raise NotImplementedError

    def update(self, state, ctx: StepContext) -> Tuple[Any, Dict[str, jnp.ndarray]]:
        return state, {}

    def period(self) -> int | None:
        """Steps between the sampler's periodic (expensive) updates, or None. The training loop then compiles two
        programs, one for the steps that do the update and one for the others, so that most steps carry neither
        the update's lax.cond nor its scratch memory."""
        return None

    def on_period(self, state, ctx: StepContext, fn):
        """fn(state) on the steps of the sampler's period (step % period == 0, the first step included), else the
        state unchanged: decided when the step was compiled (ctx.is_periodic) or on the device."""
        if ctx.is_periodic is None:
            return jax.lax.cond(ctx.step % self.period() == 0, fn, lambda s: s, state)
        return fn(state) if ctx.is_periodic else state

    def check_finite(self, state, aux) -> jnp.ndarray:
        """A scalar bool: whether this step's sampler outputs and state are finite."""
        leaves = [x for x in jax.tree.leaves((state, aux)) if jnp.issubdtype(x.dtype, jnp.floating)]
        if not leaves:
            return jnp.array(True)
        return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


class TableSampler(Sampler):
    """A sampler whose timestep distribution is a table p [T] (fixed or computed from its state).

    sample draws t by inverse CDF. With `importance` the weights are 1 / (T p(t)), which keep the expected weighted
    loss equal to the uniform one (improved-diffusion's resample.py); otherwise 1, and the density deliberately
    re-weights the objective.
    """

    importance = False

    def probabilities(self, state):
        """p(t), t = 0..T-1: [T] float32."""
        raise NotImplementedError

    def cdf(self, state):
        return cdf_of(self.probabilities(state))

    def sample(self, state, key, x0):
        t = inverse_cdf(key, self.cdf(state), x0.shape[0])
        w = 1.0 / (self.T * self.probabilities(state)[t]) if self.importance else jnp.ones(t.shape, jnp.float32)
        return t, w, {}


class FixedTableSampler(TableSampler):
    """A TableSampler with a table fixed at construction: subclasses define `table(cfg, process)` (float64), built
    on the host the first time it is asked for (only a discrete domain asks: process.time.draw)."""

    @classmethod
    def table(cls, cfg, process) -> np.ndarray:
        raise NotImplementedError

    @functools.cached_property
    def p64(self):
        return self.table(self.cfg, self.process)

    @functools.cached_property
    def p(self):
        return jnp.asarray(self.p64, jnp.float32)

    @functools.cached_property
    def _cdf(self):
        return jnp.asarray(np.cumsum(self.p64) / np.sum(self.p64), jnp.float32)  # in float64, then rounded

    def probabilities(self, state):
        return self.p

    def cdf(self, state):
        return self._cdf
