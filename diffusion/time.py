"""The time domain of a diffusion process, owned by the process (`process.time`): everything the timestep samplers,
the loss weightings, the train step's diagnostics and the pictures ask about time, answered once per domain.

- `DiscreteTime(T)`: the DDPM chain's integer steps t = 0..T-1 (int32).
- `ContinuousTime(grid)`: t in [0, 1] (float32; t = 0 data, t = 1 noise); `grid` cells set the resolution of the
  sweeps, the bins and the bounds of fields that count in steps (config.diffusion.grid).

A part writes its formula once (on a unit variable u in [0, 1), on log SNR, on the path's coefficients) and the domain
turns it into a draw, a table or a grid: these two classes are where the project tells the domains apart, each
method's two forms side by side (the histogram samplers' log-SNR bins, samplers/histogram.py, are the one other
place). What they give (the TimeDomain protocol):
    uniform(key, n)              uniform t: randint(0, T) | uniform[0, 1)
    from_unit(u, rounding)       u -> t: floor(u T) clipped ("floor": equal cells, uniform u gives uniform t) or
                                 round(u (T - 1)) ("nearest", the learned sampler's rounding, as its reference) | u
    probability(t, cdf, logpdf)  a distribution of u (its CDF and log-density) at t: the mass of t's "nearest" cell |
                                 the density; `cells` (T | 1) turns either into the ratio to uniform t
    unit_edges(num_bins)         the u-edges of the diagnostic bins of t (`bins`) under "nearest" rounding
    bins(t, num_bins)            the bin of each t among num_bins equal bins of the domain
    sweep(process, stride, kind) a grid of as many times as range(0, T, stride) has: every stride-th step or
                                 geometric (discrete); the cells' midpoints or even in log SNR (continuous)
    first(grid, n, skip)         the learned sampler's initial selection: steps skip..skip+n-1 (0..n-1 as its
                                 reference) | grid[skip:skip+n]
    strata(key, n, skip)         one time drawn uniformly in each of n equal strata of the domain after its first
                                 `skip` cells, and each stratum's size in cells: (t [n], cells [n]); sum_k cells_k
                                 f(t_k) is unbiased for the sum (integral, in cells) of f over the strata
    cell_share                   a bound term of one row times this is one grid cell's share of the bound: 1 (a
                                 step's KL) | 1 / grid (the ELBO integrand is per unit of t)
    draw(key, n, cdf, exact)     a density given both ways: inverse CDF over its table cdf() [T] | exact(key, n)
    weights(process, table, of_path)  a loss weighting: w = table()[t] | of_path(*process.path_coefs(t))
    size, dtype, extent          T | grid; int32 | float32; the pictures' time axis 0..T | 0..1
"""

from typing import Callable, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from config.registry import CONTINUOUS, DISCRETE
from diffusion.gaussian import stratum_edges

ROUNDINGS = ("floor", "nearest")
# continuous strata keep t this far from 0 and 1 (a flow's log SNR is infinite there): a bias of measure 2e-6
STRATA_EPS = 1e-6


def inverse_cdf(key, cdf, n: int):
    """n timesteps drawn with P(t) = cdf[t] - cdf[t - 1]: [n] int32. cdf: [T], non-decreasing, last entry 1."""
    u = jax.random.uniform(key, (n,), jnp.float32)
    t = jnp.searchsorted(cdf, u, side="right")
    return jnp.minimum(t, cdf.shape[0] - 1).astype(jnp.int32)


def cdf_of(p):
    """Cumulative sum normalised so that the last entry is exactly 1 (float32 rounding would leave it below)."""
    c = jnp.cumsum(p)
    return c / c[-1]


def sweep_grid(num_timesteps: int, stride: int, kind: str = "even"):
    """The discrete sweep's timesteps: 0, stride, 2 stride, ... (even), or as many timesteps spaced geometrically: 0
    and the starts of the geometric strata of 1..T-1 (gaussian.stratum_edges), dense at small t where most of the
    bound is (an even stride never selects 1..stride-1)."""
    if kind == "even":
        return jnp.arange(0, num_timesteps, stride, dtype=jnp.int32)
    K = len(range(0, num_timesteps, stride))
    if K < 2:
        return jnp.zeros((1,), jnp.int32)
    return jnp.asarray(np.concatenate([[0], stratum_edges(num_timesteps, K - 1)[:-1]]), jnp.int32)


def continuous_grid(process, K: int, kind: str = "even"):
    """K times in (0, 1): the cell midpoints (k + 1/2) / K (even), or K times evenly spaced in log SNR between those
    of the first and last midpoints (geometric; t = 0 and 1 are left out, where a flow's log SNR is infinite):
    float32 [K]."""
    mid = (np.arange(K) + 0.5) / K
    if kind == "even" or K < 2:
        return jnp.asarray(mid, jnp.float32)
    ends = process.logsnr(jnp.asarray([mid[0], mid[-1]], jnp.float32))
    return process.t_of_logsnr(jnp.linspace(ends[0], ends[1], K)).astype(jnp.float32)


@runtime_checkable
class TimeDomain(Protocol):
    """What a time domain answers (the module docstring says how each domain does): the contract DiscreteTime and
    ContinuousTime keep, and the one a process's `time_domain` must keep. Its users: the timestep samplers
    (uniform, from_unit, probability, draw, strata), the loss weightings (weights), the learned sampler
    alone (sweep, first, unit_edges, cells, cell_share), the train step's diagnostics and the pictures (bins,
    extent)."""

    capability: str  # config.registry.DISCRETE or CONTINUOUS: what a process with this domain offers
    size: int  # T, or the grid's cells
    dtype: object  # int32 | float32
    extent: float  # the pictures' time axis: 0..T | 0..1
    cells: int  # cells of one t: T | 1 (probability's ratio to uniform t)
    cell_share: float  # one row's bound term times this is one grid cell's share: 1 | 1 / grid

    def uniform(self, key, n: int): ...
    def from_unit(self, u, rounding: str = "floor"): ...
    def probability(self, t, cdf: Callable, logpdf: Callable): ...
    def unit_edges(self, num_bins: int): ...
    def bins(self, t, num_bins: int): ...
    def sweep(self, process, stride: int, kind: str = "even"): ...
    def first(self, grid, n: int, skip: int = 0): ...
    def strata(self, key, n: int, skip: int = 0): ...
    def draw(self, key, n: int, cdf: Callable, exact: Callable): ...
    def weights(self, process, table: Callable, of_path: Callable): ...


class DiscreteTime:
    """t = 0..T-1, int32 (module docstring)."""

    capability = DISCRETE
    dtype = jnp.int32
    cell_share = 1.0

    def __init__(self, num_timesteps: int):
        self.size = int(num_timesteps)
        self.cells = self.size
        self.extent = self.size

    def uniform(self, key, n: int):
        return jax.random.randint(key, (n,), 0, self.size, dtype=jnp.int32)

    def from_unit(self, u, rounding: str = "floor"):
        T = self.size
        if rounding == "nearest":
            return jnp.round(u * (T - 1)).astype(jnp.int32)
        return jnp.minimum(jnp.floor(u * T), T - 1).astype(jnp.int32)

    def probability(self, t, cdf, logpdf):
        """The mass of t's "nearest" cell [(t - 1/2) / (T - 1), (t + 1/2) / (T - 1)) of u, clipped to [0, 1]."""
        lo = jnp.clip((t - 0.5) / (self.size - 1), 0.0, 1.0)
        hi = jnp.clip((t + 0.5) / (self.size - 1), 0.0, 1.0)
        return cdf(hi) - cdf(lo)

    def unit_edges(self, num_bins: int):
        T = self.size
        edges_t = np.ceil(np.arange(num_bins + 1) * T / num_bins)  # first t of each bin, then T
        return jnp.asarray(np.clip((edges_t - 0.5) / (T - 1), 0.0, 1.0), jnp.float32)

    def bins(self, t, num_bins: int):
        return t * num_bins // self.size

    def sweep(self, process, stride: int, kind: str = "even"):
        return sweep_grid(self.size, stride, kind)

    def first(self, grid, n: int, skip: int = 0):
        return jnp.arange(skip, skip + n, dtype=jnp.int32)

    def strata(self, key, n: int, skip: int = 0):
        """Strata of the steps skip..T-1, as equal as integers allow (sizes differ by at most 1)."""
        edges = skip + (np.arange(n + 1) * (self.size - skip)) // n
        lo, sizes = jnp.asarray(edges[:-1], jnp.int32), jnp.asarray(np.diff(edges), jnp.int32)
        t = lo + jnp.floor(jax.random.uniform(key, (n,)) * sizes).astype(jnp.int32)
        return jnp.minimum(t, lo + sizes - 1), sizes.astype(jnp.float32)

    def draw(self, key, n: int, cdf, exact):
        return inverse_cdf(key, cdf(), n)

    def weights(self, process, table, of_path):
        w = jnp.asarray(table(), jnp.float32)
        return lambda t: w[t]


class ContinuousTime:
    """t in [0, 1], float32, with `grid` cells (module docstring)."""

    capability = CONTINUOUS
    dtype = jnp.float32
    cells = 1
    extent = 1.0

    def __init__(self, grid: int):
        self.size = int(grid)
        self.cell_share = 1.0 / self.size

    def uniform(self, key, n: int):
        return jax.random.uniform(key, (n,), jnp.float32)

    def from_unit(self, u, rounding: str = "floor"):
        return u

    def probability(self, t, cdf, logpdf):
        return jnp.exp(logpdf(t))

    def unit_edges(self, num_bins: int):
        return jnp.linspace(0.0, 1.0, num_bins + 1, dtype=jnp.float32)

    def bins(self, t, num_bins: int):
        return jnp.clip(jnp.floor(t * num_bins), 0, num_bins - 1).astype(jnp.int32)

    def sweep(self, process, stride: int, kind: str = "even"):
        return continuous_grid(process, len(range(0, self.size, stride)), kind)

    def first(self, grid, n: int, skip: int = 0):
        return grid[skip : skip + n]

    def strata(self, key, n: int, skip: int = 0):
        """Strata of [skip / grid, 1]; t is kept in [STRATA_EPS, 1 - STRATA_EPS], where a flow's log SNR is finite."""
        lo = skip / self.size
        length = (1.0 - lo) / n
        t = lo + length * (jnp.arange(n) + jax.random.uniform(key, (n,)))
        return jnp.clip(t, STRATA_EPS, 1.0 - STRATA_EPS).astype(jnp.float32), jnp.full((n,), length * self.size)

    def draw(self, key, n: int, cdf, exact):
        return exact(key, n)

    def weights(self, process, table, of_path):
        return lambda t: of_path(*process.path_coefs(t)).astype(jnp.float32)


__all__ = ["TimeDomain", "DiscreteTime", "ContinuousTime", "inverse_cdf", "cdf_of", "ROUNDINGS"]
