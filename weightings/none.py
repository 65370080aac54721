"""No weighting: w(t) = 1, the plain MSE of the model's target (DDPM's simple loss)."""

import jax.numpy as jnp
import numpy as np

from weightings.base import WEIGHTINGS, FixedWeighting, Weighting


@WEIGHTINGS.register
class NoWeighting(Weighting):
    name = "none"
    continuous = True

    @classmethod
    def needs(cls, cfg):
        return []  # any process: with a learned schedule the loss is the ELBO, unweighted

    @classmethod
    def applied(cls, cfg, process):
        """w = 1 without asking the process anything (a learned schedule's coefficients need its parameters)."""
        return FixedWeighting(lambda t: jnp.ones(jnp.shape(t), jnp.float32))

    @classmethod
    def of_path(cls, cfg, alpha, sigma, c1, c2):
        return jnp.ones_like(alpha)

    @classmethod
    def table(cls, cfg, process):
        return np.ones(process.num_timesteps)
