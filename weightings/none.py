"""No weighting: w(t) = 1, the plain MSE of the model's target (DDPM's simple loss)."""

import numpy as np

from weightings.base import WEIGHTINGS, Weighting


@WEIGHTINGS.register
class NoWeighting(Weighting):
    name = "none"

    @classmethod
    def table(cls, cfg, process):
        return np.ones(process.num_timesteps)
