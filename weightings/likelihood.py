"""Likelihood weighting on the DDPM chain: each step's MSE weighted as the variational bound weighs it, so that
training minimises the bound's terms (docs/method.md#likelihood-weighting) instead of the unweighted eps-MSE.

For t >= 1 the bound's term is KL(q(x_{t-1} | x_t, x0) || p(x_{t-1} | x_t)); with an eps prediction the two means
differ by beta_t / (sqrt(alpha_t) sqrt(1 - alpha_bar_t)) (eps - eps_hat), alpha_t = 1 - beta_t (Ho et al. 2020,
eq. 12), so per dimension
    KL_t = w_eps(t) (eps - eps_hat)^2,   w_eps(t) = beta_t^2 / (2 sigma_t^2 alpha_t (1 - alpha_bar_t)),
sigma_t^2 the reverse variance: beta_t for fixed_large (beta~_1 at t = 0, as diffusion/ddpm.py), beta~_t for
fixed_small (clipped at t = 0 as its log is). On the x0- or v-target's MSE the same weight of each noise level is
w_eps SNR / F (F: SNR for eps, 1 for x0, SNR + 1 for v; weightings/base.py).

Choices written down: at t = 0 the same Gaussian form (the bound's own t = 0 term is the discretised decoder, not an
MSE: this is the learned sampler's "kl" row there, the reference code's KL at every step); a learned variance
(variance=learned_range) is weighted with fixed_large's sigma_t^2 (its variance has its own term in the hybrid loss);
the table is divided by its mean over t, so that the loss has the unweighted loss's scale where the weight is 1 on
average (Adam ignores a constant factor, the gradient clipping at a fixed norm does not). Improved DDPM (Nichol &
Dhariwal 2021) trains this objective with timesteps drawn by the loss's second moment (`loss_second_moment`; the
adaptive noise schedule keeps it unbiased too), since with uniform t its estimate is noisy: w_eps spans two orders of
magnitude on the linear schedule (1.1 at t = 0, 0.01 at t = T - 1 before the normalisation).
"""

import numpy as np

from weightings.base import WEIGHTINGS, Weighting


def bound_weights_eps(process) -> np.ndarray:
    """w_eps(t) of every step (module docstring), float64 [T], not normalised; from the chain's alpha_bar alone:
    beta_t = 1 - alpha_bar_t / alpha_bar_{t-1}, beta~_t = beta_t (1 - alpha_bar_{t-1}) / (1 - alpha_bar_t)."""
    abar = process.alphas_cumprod_np()
    prev = np.concatenate([[1.0], abar[:-1]])
    beta = 1.0 - abar / prev
    tilde = beta * (1.0 - prev) / (1.0 - abar)
    if getattr(process, "variance", "fixed_large") == "fixed_small":
        var = np.concatenate([tilde[1:2], tilde[1:]])  # its log clipped at t = 0: beta~_1 there
    else:
        var = np.concatenate([tilde[1:2], beta[1:]])
    return beta**2 / (2.0 * var * (1.0 - beta) * (1.0 - abar))


@WEIGHTINGS.register
class Likelihood(Weighting):
    name = "likelihood"

    @classmethod
    def table(cls, cfg, process):
        snr = process.snr_np()
        factor = {"eps": snr, "x0": np.ones_like(snr), "v": snr + 1.0}[process.target]
        w = bound_weights_eps(process) * snr / factor
        return w / w.mean()
