"""The time domain of a diffusion process, owned by the process (`process.time`): everything the timestep samplers,
the loss weightings, the train step's diagnostics and the pictures ask about time, answered once per domain.

- `DiscreteTime(T)`: the DDPM chain's integer steps t = 0..T-1 (int32).
- `ContinuousTime(grid)`: t in [0, 1] (float32; t = 0 data, t = 1 noise); `grid` cells set the resolution of the
  sweeps, the bins and the bounds of fields that count in steps (config.diffusion.grid).

A part writes its formula once (on a unit variable u in [0, 1), on log SNR, on the path's coefficients) and the domain
turns it into a draw, a table or a grid: these two classes are where the project tells the domains apart, each
method's two forms side by side. What they give:
    uniform(key, n)              uniform t: randint(0, T) | uniform[0, 1)
    from_unit(u, rounding)       u -> t: floor(u T) clipped ("floor": equal cells, uniform u gives uniform t) or
                                 round(u (T - 1)) ("nearest", the learned sampler's rounding, as its reference) | u
    to_unit(t)                   t -> u: the middle of t's "floor" cell, (t + 1/2) / T | t
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
    logsnr_bins(process, n)      equal log-SNR bins of the domain, for the histogram samplers (`Bins`)
    draw(key, n, cdf, exact)     a density given both ways: inverse CDF over its table cdf() [T] | exact(key, n)
    weights(process, table, of_path)  a loss weighting: w = table()[t] | of_path(*process.path_coefs(t))
    size, dtype, extent          T | grid; int32 | float32; the pictures' time axis 0..T | 0..1
"""

import jax
import jax.numpy as jnp
import numpy as np

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


def chain_bins(logsnr: np.ndarray, num_bins: int) -> np.ndarray:
    """The bin (0 .. num_bins - 1) of each timestep of a chain with log SNRs `logsnr` [T] (float64; -inf allowed at
    a zero-terminal end): equal bins between the extreme finite values. [T] int64."""
    finite = logsnr[np.isfinite(logsnr)]
    lam = np.clip(logsnr, finite.min(), finite.max())
    lo, hi = finite.min(), finite.max()
    b = np.floor((lam - lo) / (hi - lo) * num_bins).astype(np.int64)
    return np.clip(b, 0, num_bins - 1)


def logsnr_range(process, num_bins: int) -> np.ndarray:
    """In continuous time, the num_bins + 1 equally spaced log SNRs of the bin edges, from lambda(0.5 / grid) down to
    lambda(1 - 0.5 / grid): [num_bins + 1] float64, decreasing."""
    h = 0.5 / process.time.size
    ends = np.asarray(process.logsnr(jnp.asarray([h, 1.0 - h], jnp.float32)), np.float64)
    return np.linspace(ends[0], ends[1], num_bins + 1)


def continuous_edges(process, num_bins: int) -> np.ndarray:
    """The times of the bin edges in continuous time, increasing, 0 first and 1 last: [num_bins + 1] float64. Bin b
    is [edges[b], edges[b + 1]), its log SNR between the (num_bins - b)-th and (num_bins - b - 1)-th of num_bins + 1
    equal steps from the largest lambda to the smallest."""
    lam = logsnr_range(process, num_bins)
    t = np.asarray(process.t_of_logsnr(jnp.asarray(lam, jnp.float32)), np.float64)
    t = np.maximum.accumulate(np.clip(t, 0.0, 1.0))
    t[0], t[-1] = 0.0, 1.0
    return t


class ChainBins:
    """Equal log-SNR bins of a chain (samplers/histogram.py): bin b holds the n_b steps whose lambda falls in it
    (bins may be empty), its measure under uniform t mu_b = n_b / T; within a bin every step is equally likely."""

    def __init__(self, process, num_bins: int):
        lam = process.logsnr_np()
        bins = chain_bins(lam, num_bins)
        T = lam.shape[0]
        self.bin_of = jnp.asarray(bins, jnp.int32)  # [T]
        self.sizes = jnp.asarray(np.bincount(bins, minlength=num_bins), jnp.float32)  # n_b
        self.mu64 = np.bincount(bins, minlength=num_bins) / T
        finite = lam[np.isfinite(lam)]
        lam_edges = np.linspace(finite.min(), finite.max(), num_bins + 1)  # bin b: increasing lambda
        self.logsnr_mid64 = 0.5 * (lam_edges[1:] + lam_edges[:-1])
        self.T = T

    def index(self, t):
        return self.bin_of[t]

    def step_probabilities(self, q):
        """p(t) [T] of bin probabilities q [num_bins], uniform within each bin."""
        return q[self.bin_of] / jnp.maximum(self.sizes[self.bin_of], 1.0)

    def density(self, q, t):
        """p(t) relative to uniform t, T p(t): [B]."""
        return self.T * self.step_probabilities(q)[t]

    def draw(self, key, q, n: int):
        """(t [n], mu_b / q_b [n]): steps by inverse CDF over p(t), and each one's ratio of uniform to drawn."""
        p = self.step_probabilities(q)
        t = inverse_cdf(key, cdf_of(p), n)
        return t, 1.0 / (self.T * p[t])


class IntervalBins:
    """Equal log-SNR bins in continuous time (samplers/histogram.py): between lambda at the first and last cell
    midpoints of the grid, edges mapped to times by the process's inverse (t_of_logsnr), the outer ones moved to 0
    and 1; mu_b = the bin's length in t; within a bin t is uniform."""

    def __init__(self, process, num_bins: int):
        edges = continuous_edges(process, num_bins)
        self.edges = jnp.asarray(edges, jnp.float32)
        self.mu64 = np.diff(edges)
        lam_edges = logsnr_range(process, num_bins)  # bin b: increasing t, decreasing lambda
        self.logsnr_mid64 = 0.5 * (lam_edges[1:] + lam_edges[:-1])
        self.num_bins = num_bins

    def index(self, t):
        b = jnp.searchsorted(self.edges[1:-1], t, side="right")
        return jnp.clip(b, 0, self.num_bins - 1).astype(jnp.int32)

    def density(self, q, t):
        """p(t) [B]."""
        b = self.index(t)
        return q[b] / jnp.asarray(self.mu64, jnp.float32)[b]

    def draw(self, key, q, n: int):
        """(t [n], mu_b / q_b [n]): a bin by inverse CDF over q, then t uniform within it."""
        k_bin, k_within = jax.random.split(key)
        b = inverse_cdf(k_bin, cdf_of(q), n)
        lo, hi = self.edges[b], self.edges[b + 1]
        t = jnp.clip(lo + (hi - lo) * jax.random.uniform(k_within, (n,), jnp.float32), 0.0, 1.0)
        return t, jnp.asarray(self.mu64, jnp.float32)[b] / q[b]


class DiscreteTime:
    """t = 0..T-1, int32 (module docstring)."""

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

    def to_unit(self, t):
        return (jnp.asarray(t, jnp.float32) + 0.5) / self.size

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

    def logsnr_bins(self, process, num_bins: int):
        return ChainBins(process, num_bins)

    def draw(self, key, n: int, cdf, exact):
        return inverse_cdf(key, cdf(), n)

    def weights(self, process, table, of_path):
        w = jnp.asarray(table(), jnp.float32)
        return lambda t: w[t]


class ContinuousTime:
    """t in [0, 1], float32, with `grid` cells (module docstring)."""

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

    def to_unit(self, t):
        return t

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

    def logsnr_bins(self, process, num_bins: int):
        return IntervalBins(process, num_bins)

    def draw(self, key, n: int, cdf, exact):
        return exact(key, n)

    def weights(self, process, table, of_path):
        return lambda t: of_path(*process.path_coefs(t)).astype(jnp.float32)


__all__ = ["DiscreteTime", "ContinuousTime", "ChainBins", "IntervalBins", "inverse_cdf", "cdf_of", "ROUNDINGS"]
