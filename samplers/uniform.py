"""Uniform timesteps: t ~ U{0, ..., T-1}, weight 1 (Ho et al. 2020); in continuous time t ~ U[0, 1) (VDM, SiT)."""

import jax.numpy as jnp

from samplers.base import SAMPLERS, Sampler


@SAMPLERS.register
class UniformSampler(Sampler):
    name = "uniform"
    continuous = True

    def sample(self, state, key, x0):
        B = x0.shape[0]
        return self.time.uniform(key, B), jnp.ones((B,), jnp.float32), {}
