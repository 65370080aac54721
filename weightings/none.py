"""No weighting: w(t) = 1, the plain MSE of the model's target (DDPM's simple loss)."""

import jax.numpy as jnp
import numpy as np

from weightings.base import WEIGHTINGS, Weighting


@WEIGHTINGS.register
class NoWeighting(Weighting):
    name = "none"
    continuous = True

    @classmethod
    def of_path(cls, cfg, alpha, sigma, c1, c2):
        return jnp.ones_like(alpha)

    @classmethod
    def table(cls, cfg, process):
        return np.ones(process.num_timesteps)
