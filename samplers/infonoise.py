"""InfoNoise (Raya et al. 2026, "Noise Scheduling as Information-Guided Allocation in Diffusion Training",
arXiv 2602.18647): an online density of the noise level that follows the rate at which the data's conditional
entropy falls with the noise, at no extra forward passes, leaving the loss and its weighting unchanged.

In the variance-exploding coordinate x_sigma = x0 + sigma eps (sigma = exp(-lambda / 2), lambda = log SNR; any
Gaussian path is one after rescaling by alpha), the conditional-entropy rate per unit of sigma is
1/2 |d gamma / d sigma| mmse(sigma) with gamma = SNR = sigma^-2 and mmse the x0-MSE of the optimal denoiser; per unit
of log sigma (and so of lambda = -2 log sigma) it is proportional to mmse(sigma) / sigma^2. The paper allocates
training in proportion to it, times a gate that removes the lowest noise levels, where the rate is largest yet
training gains little:

    rho(lambda)  proportional to  SNR m(lambda) g(sigma),   g(sigma) = sigma^n / (sigma^n + c^n)

with m the binned x0-MSE of the current model (its running mean per log-SNR bin, samplers/histogram.py). The
sampling density pi is rho divided by the objective's own weight on the x0-MSE, so that (density x loss weight) per
unit of lambda is rho and the objective stays as configured: with loss w(t) MSE_target and MSE_target = F(t)
x0-MSE (process.x0_mse_factor: eps SNR, x0 1, v SNR + 1, a flow's velocity 1 / t^2), pi(lambda) proportional to
SNR m g / (w F). For the unweighted eps-MSE this is pi proportional to m g. Loss weight 1: no importance weight.

Per bin b (log-SNR middle lambda_b, sigma_b = exp(-lambda_b / 2)): the running means of each example's x0-MSE,
MSE / F, and of its weight relative to the bound's, w F / SNR, give r_b = m_b g(sigma_b) / v_b.

Gate (`gate`): "fixed" the onset c = `gate_c` (default 0.15 in sigma, the setting a public port attributes to the
paper's CIFAR-10 runs), "none" no gate, "auto" the onset a public JAX port attributes to the paper's appendix: with
the rate per unit of sigma, s_b = m_b / sigma_b^3, c is the largest sigma_b whose s_b reaches `gate_p` (0.002) times the
largest s; exponent n = `gate_n` (3). Both the largest s and c are taken over the bins that hold time (mu_b > 0): on
the chain some bins at the low-noise end hold no timestep (6 of 100 on the linear T = 1,000 chain), and their m_b,
copied from the nearest seen bin at a smaller sigma_b, would give a rate the model never showed.

Sources and choices: no official code exists; the formulas were read from two public ports (asdf1434/noise-schedule-
exp `src/infonoise.py`, JAX; WalkingMeatAxolotl/AnimaLoraStudio `runtime/training/timestep_samplers/infonoise.py`,
PyTorch), which disagree on details. This project bins in log SNR (a fixed multiple of log sigma) over the time
domain's own range rather than a fixed sigma range, keeps per-step running means (decay 0.99) instead of refreshing
every N steps with smoothing, starts uniform in t until the seen bins hold `warmup_mass` of the measure of t, draws
uniformly in t within a bin, mixes in no uniform share (`uniform_prob` 0), and divides by the objective's weight per
example (the JAX port divides by its fixed weight; the PyTorch port bins the velocity MSE and divides by nothing).
The analytic check: on Gaussian data of variance v the optimal denoiser's x0-MSE is v sigma^2 / (v + sigma^2)
(tests/test_baselines.py). Discrete and continuous time (an invertible log SNR).
"""

import jax.numpy as jnp
import numpy as np

from config.fields import Choice, Num
from samplers.base import SAMPLERS
from samplers.histogram import HISTOGRAM_FIELDS, HistogramSampler

GATES = ("fixed", "auto", "none")


def gate(sigma, c, n):
    """sigma^n / (sigma^n + c^n)."""
    return sigma**n / (sigma**n + c**n)


@SAMPLERS.register
class InfoNoiseSampler(HistogramSampler):
    name = "infonoise"
    continuous = True
    inverts = True
    gaussian = True  # the x0-MSE and its factors (process.x0_mse_factor)
    importance = False
    QUANTITIES = ("x0_mse", "rel_weight")
    FIELDS = dict(
        HISTOGRAM_FIELDS,
        uniform_prob=Num(0.0, 0.0, 1.0, note="mixture with uniform t (InfoNoise: none)"),
        gate=Choice("fixed", GATES),  # the gate's onset: gate_c, automatic, or no gate
        gate_c=Num(0.15, 0.0, lo_open=True, note="the gate's onset in sigma with gate='fixed'"),
        gate_n=Num(3.0, 0.0, lo_open=True, note="(paper: 3)"),
        gate_p=Num(0.002, 0.0, 1.0, lo_open=True, note="the automatic onset's threshold (paper: 0.002)"),
    )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.sigma = jnp.asarray(np.exp(-0.5 * self.bin_logsnr64), jnp.float32)  # each bin's middle sigma

    def values(self, ctx):
        t = ctx.t
        F = self.process.x0_mse_factor(t)
        rel = self.process.x0_mse_factor_per_snr(t)  # finite at t = 0 exactly, where F and SNR are both infinite
        return dict(
            x0_mse=jnp.where(F > 0, ctx.mse / jnp.where(F > 0, F, 1.0), 0.0),
            rel_weight=jnp.where(jnp.isfinite(rel), ctx.loss_weight * rel, 0.0),  # 0 where alpha = 0 (pure noise)
        )

    def onset(self, m):
        """The gate's c: the field, or the automatic onset from the running x0-MSEs (module docstring)."""
        if self.cfg.gate != "auto":
            return self.cfg.gate_c
        s = m / self.sigma**3
        # Only bins that hold timesteps count, in the maximum too: a chain's empty bin carries its nearest seen
        # bin's m at a smaller sigma of its own, a rate the model never showed (in continuous time no bin is empty)
        nonempty = self.mu > 0
        reach = (s >= self.cfg.gate_p * jnp.max(jnp.where(nonempty, s, -jnp.inf))) & nonempty
        return jnp.max(jnp.where(reach, self.sigma, 0.0))

    def bin_mass(self, m):
        x0, v = m["x0_mse"], m["rel_weight"]
        c = self.onset(x0)
        g = 1.0 if self.cfg.gate == "none" else gate(self.sigma, c, self.cfg.gate_n)
        return jnp.where(v > 0, x0 * g / jnp.where(v > 0, v, 1.0), 0.0)

    def update(self, state, ctx):
        state, metrics = super().update(state, ctx)
        m = self.filled(state)
        return state, dict(metrics, gate_c=jnp.asarray(self.onset(m["x0_mse"]), jnp.float32))
