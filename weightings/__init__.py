"""Loss weightings w(t), registered by name (WEIGHTINGS): a separate axis from the timestep sampler
(docs/method.md#sampling-density-and-loss-weight).

A weighting is a Weighting subclass with its own config fields and `table(cfg, process)` -> w [T] float64,
computed once on the host; in the step the per-example loss is sampler_weight * w(t) * MSE. A weighting with
parameters of its own (uncertainty: EDM2's learned log-variance) defines `applied(cfg, process)`, an object with the
same interface whose `loss` reads its parameters from the model's variables and whose `init_params` adds them.
Adding one: a module of this package registered with `@WEIGHTINGS.register` (docs/extending.md#a-weighting);
the package imports it (config.registry.import_parts).
"""

from config.registry import import_parts
from weightings.base import WEIGHTINGS, Weighting

import_parts(__name__, __path__)


def make_weighting(weighting_cfg, process):
    """The weighting config.weighting names, applied to the process: w(t [B]) -> [B] float32 and loss(params, t,
    mse) -> [B], the per-example objective before the sampler's importance weight (Weighting.applied)."""
    return WEIGHTINGS[weighting_cfg.name].applied(WEIGHTINGS.own_config(weighting_cfg), process)


__all__ = ["Weighting", "WEIGHTINGS", "make_weighting"]
