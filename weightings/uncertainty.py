"""EDM2's learned uncertainty weighting (Karras et al. 2024, "Analyzing and Improving the Training Dynamics of
Diffusion Models", arXiv 2312.02696, section 5 and appendix; code NVlabs/edm2, training/training_loop.py EDM2Loss and
training/networks_edm2.py Precond).

A small function of the noise level predicts a log-variance u, trained jointly with the model on

    loss = w(t) MSE / exp(u(t)) + u(t)

per example. For a fixed MSE profile the minimiser is exp(u(t)) = E[w(t) MSE | t], so the learned weighting
1 / exp(u) divides every noise level's loss by its own expected value: the levels contribute equally to the gradient
(the EDM2 paper's "uncertainty" interpretation, after Kendall et al. 2018's multi-task weighting).

The function, as EDM2's Precond (logvar_fourier, logvar_linear):

    c = -lambda / 8                 EDM2's c_noise = ln(sigma) / 4 with sigma = exp(-lambda / 2), lambda = log SNR
    f = sqrt(2) cos(2 pi (nu c + phi))   nu ~ N(0, 1), phi ~ U(0, 1), C = `channels` fixed random features
    u = <w / |w|, f>                w [C] trained, initialised N(0, 1): EDM2's MPConv(C, 1, kernel=[]) with its
                                    weight normalised in the forward pass (gain 1)

Choices written down:
- EDM2 multiplies the uncertainty onto its EDM weighting lambda(sigma) = (sigma^2 + sigma_data^2) / (sigma
  sigma_data)^2, which makes its weighted MSE the MSE of the network's raw output under EDM's preconditioning. Here
  w(t) is 1: the MSE of the network's own output for the process's target (what weighting "none" gives), the
  analogue for every target; the uncertainty does the rest of the balancing.
- EDM2 sums the per-element loss over pixels (u broadcast to every element); here MSE is the mean over elements, so
  the loss is EDM2's divided by the element count: the same minimiser, and the same gradient direction for u.
- EDM2 also rewrites the stored weight w normalised after every optimizer step (forced weight normalisation); here
  it is not rewritten: the function is the same, but the effective step on w shrinks as |w| grows under Adam.
- The features' nu and phi come from numpy's default_rng(`seed`), fixed at construction and not trained (EDM2's
  buffers from torch.randn / torch.rand at initialisation).
- lambda of a zero-terminal-SNR step (-inf) is clipped to [-30, 30] (|c| <= 3.75) so that u stays finite.
- The parameters are the variables collection "weighting" beside the network's ("params"), so the optimizer, the
  EMA, the checkpoint and the sharding carry them as the learned noise schedule's (diffusion/vp.py).
- Samplers that record losses (loss_second_moment, adaptive_noise) and the learned sampler's reward="loss" see the
  objective itself, w MSE / exp(u) + u.
"""

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import Int
from weightings.base import WEIGHTINGS, Weighting

LAMBDA_CLIP = 30.0


def fourier_features(c, nu, phi):
    """sqrt(2) cos(2 pi (nu c + phi)): c [B] -> [B, C]."""
    return jnp.sqrt(2.0) * jnp.cos(2.0 * jnp.pi * (c[:, None] * nu[None, :] + phi[None, :]))


class LearnedUncertainty:
    """The applied weighting (weightings.make_weighting): loss(params, t, mse) = mse / exp(u(t)) + u(t)."""

    def __init__(self, cfg, process):
        rng = np.random.default_rng(cfg.seed)
        self.nu = jnp.asarray(rng.standard_normal(cfg.channels), jnp.float32)
        self.phi = jnp.asarray(rng.random(cfg.channels), jnp.float32)
        self.channels = cfg.channels
        self.logsnr = lambda t: jnp.clip(process.logsnr(t), -LAMBDA_CLIP, LAMBDA_CLIP)

    def __call__(self, t):
        return jnp.ones(jnp.shape(t), jnp.float32)

    def init_params(self, key, variables):
        """The model's variables with the collection "weighting" added: {"w": [C] ~ N(0, 1)}."""
        return {**variables, "weighting": {"w": jax.random.normal(key, (self.channels,), jnp.float32)}}

    def logvar(self, params, t):
        """u(t) [B] with the parameters of `params` (the model's variables, "weighting" among them)."""
        w = params["weighting"]["w"]
        f = fourier_features(-self.logsnr(t) / 8.0, self.nu, self.phi)
        return f @ (w / jnp.linalg.norm(w))

    def loss(self, params, t, mse):
        u = self.logvar(params, t)
        return mse * jnp.exp(-u) + u


@WEIGHTINGS.register
class Uncertainty(Weighting):
    name = "uncertainty"
    continuous = True
    FIELDS = dict(
        channels=Int(128, 1, note="(EDM2's logvar_channels: 128)"),
        seed=Int(0, 0),  # of the fixed random Fourier features
    )

    @classmethod
    def applied(cls, cfg, process):
        return LearnedUncertainty(cfg, process)
