"""The adaptive noise schedule of Kingma & Gao 2023 ("Understanding Diffusion Objectives as the ELBO with Simple
Data Augmentation", arXiv 2303.00848): importance sampling of the noise level with a density that follows the loss.

Every objective is an expectation over the noise level; drawing the level from a density p and weighting each
example's loss by (its density under the objective) / p leaves the objective unchanged and changes only the variance
of its estimate. Kingma & Gao adapt p during training to be proportional to the weighted loss per unit of log SNR,
p(lambda) proportional to w(lambda) E_{x, eps}[|eps - eps_hat|^2] (their w(lambda) includes the density of lambda
that uniform t induces), estimated by a histogram over lambda with running averages (samplers/histogram.py):

    quantity: each example's weighted MSE w(t) MSE (ctx.loss_weight ctx.mse: the fixed loss weighting's factor
              times the target's MSE, before a learned weighting's own terms, so never negative; EDM2's
              uncertainty weighting's objective MSE / exp(u) + u can be, and a density built from it would not be
              one), m_b its running mean in bin b;
    mass:     the loss per unit of t integrated over the bin, r_b = m_b mu_b (mu_b: the bin's measure under uniform
              t, n_b / T on the chain), so that an equal loss in every bin gives exactly uniform t;
    weights:  1 / (T p(t)) on the chain, 1 / p(t) in continuous time: E_p[weight loss] is the uniform objective.

Choices this project made, written down: the bin count (`num_bins` 100), the running-average decay (`decay` 0.99)
and the warm-up (`warmup_mass`) are not taken from a public implementation (none was found); the uniform mixture
(`uniform_prob` 0.001, as improved-diffusion's importance sampler) keeps every weight finite. Discrete and
continuous time (an invertible log SNR: validation refuses the learned VP schedule).
"""

from config.fields import Num
from samplers.base import SAMPLERS
from samplers.histogram import HISTOGRAM_FIELDS, HistogramSampler


@SAMPLERS.register
class AdaptiveNoiseSampler(HistogramSampler):
    name = "adaptive_noise"
    continuous = True
    inverts = True
    importance = True
    FIELDS = dict(
        HISTOGRAM_FIELDS,
        uniform_prob=Num(0.001, 0.0, 1.0, lo_open=True, note="mixture with uniform; keeps the weights finite"),
    )

    def values(self, ctx):
        return dict(mean=ctx.loss_weight * ctx.mse)

    def bin_mass(self, m):
        return m["mean"] * self.mu
