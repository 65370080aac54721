"""SpeeD's timestep sampling (Wang et al., arXiv 2405.17403; reference code NUS-HPC-AI-Lab/SpeeD,
speed/diffusion/speed/__init__.py), docs/method.md#speed-sampling.

Asymmetric density: p(t) = k / (T + tau (k - 1)) for t < tau and 1 / (T + tau (k - 1)) for t >= tau.
Dual sampling: draw B // 2 + 1 timesteps from p, pair each with t' = |t - m|, where m = argmax(g < 1e-4) + 1 and
g = np.gradient(sqrt(1 - alpha_bar)), concatenate and keep the first B (for even B: B/2 + 1 primaries, B/2 - 1 duals).
Loss weight 1: the density deliberately re-weights the objective. Its loss weighting is weightings/speed.py.

Choices written down:
- The reference draws per GPU from each GPU's local batch; we draw over the global batch, so the primaries and
  duals do not depend on the device count (a local batch of n would have n/2 + 1 primaries per device instead).
- m can reach T when g first drops below 1e-4 at the last step (it does not for the schedules here at T = 1000:
  m = 642 linear, 959 cosine, 829 quad); a dual t' = m - 0 is then clipped to T - 1. When g never drops below 1e-4
  (small T), np.argmax returns 0 and m = 1, exactly as the reference code does.
"""

import jax.numpy as jnp
import numpy as np

from config.fields import Int, Num
from samplers.base import SAMPLERS, FixedTableSampler, inverse_cdf


def meaningful_step(process) -> int:
    """m = argmax(np.gradient(sqrt(1 - alpha_bar)) < 1e-4) + 1 (SpeeD's `meaningful_steps`)."""
    slope = np.gradient(process.noise_levels_np())
    return int(np.argmax(slope < 1e-4) + 1)


def asymmetric_probabilities(T: int, k: float, tau: int) -> np.ndarray:
    p = np.where(np.arange(T) < tau, float(k), 1.0)
    return p / p.sum()


def dual(t, m: int, T: int):
    """t' = |t - m| (SpeeD's dual timestep), clipped to T - 1."""
    return jnp.minimum(jnp.where(t < m, m - t, t - m), T - 1).astype(jnp.int32)


@SAMPLERS.register
class SpeedSampler(FixedTableSampler):
    name = "speed"
    # SpeeD's experiment configs (FFHQ: k = 2)
    FIELDS = dict(k=Num(5.0, 0, lo_open=True, note="(SpeeD's experiments use 5; FFHQ 2)"), tau=Int(700, 1, "T"))

    @classmethod
    def table(cls, cfg, process):
        return asymmetric_probabilities(process.num_timesteps, cfg.k, cfg.tau)

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.m = meaningful_step(process)

    def sample(self, state, key, x0):
        B = x0.shape[0]
        t = inverse_cdf(key, self.cdf(state), B // 2 + 1)
        t = jnp.concatenate([t, dual(t, self.m, self.T)])[:B]
        return t, jnp.ones((B,), jnp.float32), {}
