"""What the histogram samplers share (adaptive_noise.py: Kingma & Gao's adaptive noise schedule; infonoise.py:
InfoNoise): a density over the noise level kept as a histogram in log SNR whose bin masses follow running averages
of a per-example quantity measured in each bin.

Bins. `num_bins` equal bins of lambda = log SNR between the largest and the smallest lambda of the time domain, which
`logsnr_bins` builds for the process's time domain (ChainBins, IntervalBins, below):
- discrete (DDPM chain, T steps): the chain's lambda_t (a zero-terminal step's -inf counts as the smallest finite
  one); bin b holds the n_b timesteps whose lambda falls in it (bins may be empty); its measure under uniform t is
  mu_b = n_b / T;
- continuous (t in [0, 1], an invertible process): lambda at the first and last cell midpoints of the process's grid,
  t = 0.5 / grid and 1 - 0.5 / grid (a flow's lambda is infinite at t = 0 and 1); the bin edges are mapped to times
  by the process's inverse (t_of_logsnr) and the outer edges moved to 0 and 1; mu_b = the bin's length in t.
Since lambda is monotone in t, each bin is one interval of t.

State. m_b, a running mean of the binned quantity over the examples whose time fell in bin b: m_b <- decay m_b +
(1 - decay) mean over this batch's examples in b (the first time b is seen, m_b is that mean); `seen` marks the bins
seen so far. Every device updates it identically from the global batch; it is checkpointed with the train state.

Density. A subclass gives the unnormalised mass of each bin, r_b (for Kingma & Gao r_b = m_b mu_b), and the mixture
q_b = (1 - eps) r_b / sum r + eps mu_b (eps = `uniform_prob`). A bin not seen yet takes the running mean of the
nearest seen bin (by bin index; the lower one on a tie); until the seen bins hold at least `warmup_mass` of the
measure of t, q = mu (uniform t). Within a bin the density is uniform in t: on the chain p(t) = q_b / n_b for each
of its timesteps, in continuous time p(t) = q_b / mu_b. Drawing: a bin by inverse CDF over q, then a time uniformly
within it (on the chain: by inverse CDF over p(t), which is the same). Importance weights, where the subclass keeps
the objective unbiased: 1 / (T p(t)) on the chain and 1 / p(t) in continuous time, both mu_b / q_b.

Choices this project made, written down (the sources give the histogram in prose only): equal bins in log SNR over
the domain's own range; uniform within a bin in t (so a constant quantity gives exactly uniform t in both domains);
the nearest-bin fill and the warm-up mass; the running mean as an exponential average per bin.
"""

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import Int, Num
from diffusion.time import DiscreteTime, cdf_of, inverse_cdf
from samplers.base import TableSampler

HISTOGRAM_FIELDS = dict(
    num_bins=Int(100, 1, "T"),  # log-SNR bins of the histogram
    decay=Num(0.99, 0.0, 1.0, hi_open=True),  # running average of each bin's quantity
    uniform_prob=Num(0.001, 0.0, 1.0, note="mixture with uniform t"),
    # the share of the measure of t the seen bins must hold before the density leaves uniform
    warmup_mass=Num(0.99, 0.0, 1.0, lo_open=True),
)


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


def logsnr_bins(process, num_bins: int):
    """The equal log-SNR bins of the process's time domain (module docstring): a chain's steps, or intervals of t."""
    if isinstance(process.time, DiscreteTime):
        return ChainBins(process, num_bins)
    return IntervalBins(process, num_bins)


def nearest_seen(values, seen):
    """values [N] with each unseen entry replaced by the nearest seen one's (by index; the lower on a tie); values
    unchanged where none is seen."""
    n = values.shape[0]
    idx = jnp.arange(n)
    left = jax.lax.cummax(jnp.where(seen, idx, -1))
    right = jax.lax.cummin(jnp.where(seen, idx, n), reverse=True)
    use_left = (left >= 0) & ((right >= n) | (idx - left <= right - idx))
    src = jnp.where(use_left, left, jnp.where(right < n, right, idx))
    return values[src]


class HistogramSampler(TableSampler):
    """Base class (module docstring). Subclasses define `values(ctx)` -> {name: [B]}, the quantities binned (each
    with a running mean per bin, state[name]), and `bin_mass(m)` -> r [num_bins] >= 0, the unnormalised mass of
    each bin from the running means m = {name: [num_bins]} (unseen bins filled from the nearest seen one)."""

    QUANTITIES = ("mean",)

    FIELDS = HISTOGRAM_FIELDS

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.bins = logsnr_bins(process, cfg.num_bins)
        self.mu64 = self.bins.mu64
        self.mu = jnp.asarray(self.mu64, jnp.float32)  # each bin's measure under uniform t
        self.bin_logsnr64 = self.bins.logsnr_mid64  # the middle of each bin's log SNR

    def init(self, key, x0):
        nb = self.cfg.num_bins
        return dict({k: jnp.zeros((nb,), jnp.float32) for k in self.QUANTITIES}, seen=jnp.zeros((nb,), bool))

    # -- to define ---------------------------------------------------------------------------------------------
    def values(self, ctx):
        raise NotImplementedError

    def bin_mass(self, m):
        raise NotImplementedError

    # -- the density ---------------------------------------------------------------------------------------------
    def bin_index(self, t):
        return self.bins.index(t)

    def ready(self, state):
        nonempty = self.mu > 0
        covered = jnp.sum(jnp.where(state["seen"] & nonempty, self.mu, 0.0))
        return (covered >= self.cfg.warmup_mass * jnp.sum(self.mu) * (1 - 1e-6)) & jnp.any(state["seen"])

    def filled(self, state):
        """The running means with each unseen bin's taken from the nearest seen one: {name: [num_bins]}."""
        seen = state["seen"] & (self.mu > 0)
        return {k: nearest_seen(state[k], seen) for k in self.QUANTITIES}

    def bin_probabilities(self, state):
        """q_b over the bins: [num_bins] (uniform t, q = mu, until ready)."""
        eps = self.cfg.uniform_prob
        nonempty = self.mu > 0
        r = jnp.where(nonempty, self.bin_mass(self.filled(state)), 0.0)
        total = jnp.sum(r)
        ok = self.ready(state) & (total > 0)
        q = (1.0 - eps) * r / jnp.where(ok, total, 1.0) + eps * self.mu
        return jnp.where(ok, q, self.mu)

    def probabilities(self, state):
        """p(t) on the chain: [T] (discrete only)."""
        return self.bins.step_probabilities(self.bin_probabilities(state))

    def density(self, state, t):
        """The density of each t [B] relative to uniform t: p(t) in continuous time, T p(t) on the chain."""
        return self.bins.density(self.bin_probabilities(state), t)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        t, ratio = self.bins.draw(key, self.bin_probabilities(state), B)
        return t, ratio if self.importance else jnp.ones((B,), jnp.float32), {}

    def update(self, state, ctx):
        b = self.bin_index(ctx.t)
        nb = self.cfg.num_bins
        count = jnp.zeros((nb,), jnp.float32).at[b].add(1.0)
        here = count > 0
        d = self.cfg.decay
        new = {}
        for k, v in self.values(ctx).items():
            batch_mean = jnp.zeros((nb,), jnp.float32).at[b].add(v.astype(jnp.float32)) / jnp.maximum(count, 1.0)
            old = state[k]
            new[k] = jnp.where(here, jnp.where(state["seen"], d * old + (1.0 - d) * batch_mean, batch_mean), old)
        state = dict(new, seen=state["seen"] | here)
        q = self.bin_probabilities(state)
        ratio = jnp.max(jnp.where(self.mu > 0, q / jnp.where(self.mu > 0, self.mu, 1.0), 0.0))
        return state, dict(ready=self.ready(state).astype(jnp.float32), p_max_ratio=ratio)
