"""Antithetic (stratified) uniform timesteps, as VDM (Kingma et al. 2021) draws its continuous times.

One offset u0 ~ U[0, 1) for the whole global batch and an evenly spaced grid: u_i = (u0 + i / B) mod 1,
t_i = floor(u_i T). Each t_i is marginally uniform on 0..T-1 (weight 1), and the batch covers [0, T) evenly, which
lowers the variance of the batch loss. The grid is laid over the global batch, so each device's shard holds a
different stretch of it and the result does not depend on the device count.
"""

import jax
import jax.numpy as jnp

from samplers.base import SAMPLERS, Sampler


@SAMPLERS.register
class AntitheticSampler(Sampler):
    name = "antithetic"
    continuous = True  # VDM's own: t_i = u_i

    def sample(self, state, key, x0):
        B = x0.shape[0]
        u = jnp.mod(jax.random.uniform(key, ()) + jnp.arange(B, dtype=jnp.float32) / B, 1.0)
        return self.time.from_unit(u, "floor"), jnp.ones((B,), jnp.float32), {}
