"""The loss-weighting contract and registry (see weightings/__init__.py).

Continuous time (process.time a ContinuousTime): a weighting with `continuous = True` gives `of_path(cfg, alpha, sigma,
c1, c2)` -> w [B] (jnp), from the path's coefficients at each example's t (x_t = alpha x0 + sigma eps) and the
target's (c1 x0 + c2 eps; process.path_coefs). The equivalence that carries a weighting between targets and
processes: at fixed x_t an error d in x0 is an error -(alpha / sigma) d in eps, so the target's error is
(c1 - c2 alpha / sigma) d and its MSE is F times the x0-MSE, F = (c1 sigma - c2 alpha)^2 / sigma^2
(eps: SNR; x0: 1; DDPM's v: SNR + 1; flow matching's velocity: (alpha + sigma)^2 / sigma^2 = 1 / t^2).
A weighting defined on one target's MSE, w_ref(SNR), becomes w_ref F_ref / F on another's, a function of log SNR
alone for a given target: the same weight of each noise level whatever the process (the objective as a whole also
depends on the density of log SNR that the time sampler induces, which differs between processes for uniform t;
Kingma & Gao 2023 write every objective as the product of the two).
"""

from typing import Any, Dict

import jax.numpy as jnp
import numpy as np

from config.registry import DISCRETE, FIXED_SCHEDULE, GAUSSIAN, NESTED, Need, Registry

WEIGHTINGS = Registry("weighting", NESTED)


class Weighting:
    """A weighting declares `name`, its own `FIELDS` (config.weighting.<name>) and `table(cfg, process)` -> w [T]
    float64, computed once on the host from its own sub-config and the diffusion process."""

    name = "base"
    FIELDS: Dict[str, Any] = {}
    continuous = False  # whether of_path is defined (validation refuses the others in continuous time)

    @classmethod
    def needs(cls, cfg) -> list:
        """What this weighting needs of the process ([config.registry.Need]): a Gaussian path (its coefficients or
        its tables of steps), the discrete chain unless it has a continuous form, and a fixed schedule (a learned one
        trains on the ELBO itself, unweighted)."""
        out = [Need(GAUSSIAN, why="the weighting is a function of the Gaussian path's log SNR", allowed="none")]
        out += [] if cls.continuous else [Need(DISCRETE)]
        return out + [Need(FIXED_SCHEDULE, why="the loss is the ELBO itself", allowed="none")]

    @classmethod
    def applied(cls, cfg, process):
        """The weighting applied to the process (FixedWeighting): its time domain turns the weighting into a
        lookup of `table` on the chain and `of_path` of the path's coefficients in continuous time
        (diffusion/time.py weights). A weighting with parameters of its own overrides this."""
        weights = process.time.weights(process, lambda: cls.table(cfg, process), lambda *c: cls.of_path(cfg, *c))
        return FixedWeighting(weights)

    @classmethod
    def table(cls, cfg, process) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def of_path(cls, cfg, alpha, sigma, c1, c2):
        """w [B] in continuous time (module docstring)."""
        raise NotImplementedError


class FixedWeighting:
    """A weighting without parameters, applied: w = fn(t [B]) -> [B] float32, and the weighted loss of each example
    loss(params, t, mse) = w(t) mse (params unused)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t):
        return self.fn(t)

    def loss(self, params, t, mse):
        return self.fn(t) * mse


def per_target(num, alpha, sigma, c1, c2):
    """num / (c1 sigma - c2 alpha)^2 (num / (F sigma^2): a weighting on the x0-MSE times sigma^2, carried to the
    target's MSE; module docstring), 1 where that denominator is 0. jnp, [B]."""
    den = (c1 * sigma - c2 * alpha) ** 2
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)


def snr(process) -> np.ndarray:
    """alpha_bar / (1 - alpha_bar) of every step of a chain, float64 (inf where alpha_bar = 1)."""
    return process.snr_np()
