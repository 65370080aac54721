"""What the histogram samplers share (adaptive_noise.py: Kingma & Gao's adaptive noise schedule; infonoise.py:
InfoNoise): a density over the noise level kept as a histogram in log SNR whose bin masses follow running averages
of a per-example quantity measured in each bin.

Bins. `num_bins` equal bins of lambda = log SNR between the largest and the smallest lambda of the time domain, which
the process's time domain builds (process.time.logsnr_bins: diffusion/time.py ChainBins, IntervalBins):
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

from config.fields import Int, Num
from diffusion.time import continuous_edges, logsnr_range  # noqa: F401 (the bins' edges, importable from here)
from samplers.base import TableSampler

HISTOGRAM_FIELDS = dict(
    num_bins=Int(100, 1, "T"),  # log-SNR bins of the histogram
    decay=Num(0.99, 0.0, 1.0, hi_open=True),  # running average of each bin's quantity
    uniform_prob=Num(0.001, 0.0, 1.0, note="mixture with uniform t"),
    # the share of the measure of t the seen bins must hold before the density leaves uniform
    warmup_mass=Num(0.99, 0.0, 1.0, lo_open=True),
)


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
        self.bins = process.time.logsnr_bins(process, cfg.num_bins)  # the domain's log-SNR bins (diffusion/time.py)
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
