"""The Beta policy network of the learned timestep sampler (Kim et al., CVPR 2025; docs/method.md#policy).

A conv trunk (3x3 convs with ReLU, 2x2 max-pool while the image is at least 2x2), global average pooling so any
image size and channel count works (the reference flattens a fixed 32x32x3 map), an MLP, and two heads:
alpha = softplus(o1) + 1e-5, beta = softplus(o2) + 1e-5. The heads start at weight 0, bias 0.5, so every image
starts at Beta(0.974, 0.974), close to uniform.

Tokens (`vocab` > 0, the process's vocab_size: a sequence [B, L] of a masked diffusion LM): the same trunk in one
dimension, on an embedding of the tokens (width the first channel count): width-3 convs with ReLU and 2-wide
max-pool while the sequence is at least 2 long, then the average over positions, the MLP and the heads as above.
This trunk is this project's (the reference policy reads images only).
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.scipy.special import betainc, betaln, digamma

U_EPS = 1e-6  # u is clipped into (U_EPS, 1 - U_EPS) before its log-density


class BetaPolicy(nn.Module):
    channels: Sequence[int] = (32, 64, 128)
    hidden: Sequence[int] = (256, 256)
    vocab: int = 0  # tokens of this many symbols; 0: images

    @nn.compact
    def __call__(self, x0):
        """x0: [B, H, W, C] in [-1, 1], or int tokens [B, L] in 0..vocab-1 -> (alpha [B], beta [B])."""
        if self.vocab:
            h = nn.Embed(self.vocab, self.channels[0] if self.channels else 16)(jnp.asarray(x0).astype(jnp.int32))
            for c in self.channels:
                h = nn.relu(nn.Conv(c, (3,))(h))
                if h.shape[1] >= 2:
                    h = nn.max_pool(h, (2,), strides=(2,))
            h = jnp.mean(h, axis=1)
        else:
            h = x0
            for c in self.channels:
                h = nn.relu(nn.Conv(c, (3, 3))(h))
                if h.shape[1] >= 2 and h.shape[2] >= 2:
                    h = nn.max_pool(h, (2, 2), strides=(2, 2))
            h = jnp.mean(h, axis=(1, 2))
        for d in self.hidden:
            h = nn.relu(nn.Dense(d)(h))
        o = nn.Dense(2, kernel_init=nn.initializers.zeros, bias_init=nn.initializers.constant(0.5))(h)
        ab = nn.softplus(o) + 1e-5
        return ab[:, 0], ab[:, 1]


def beta_log_prob(u, a, b):
    u = jnp.clip(u, U_EPS, 1.0 - U_EPS)
    return (a - 1.0) * jnp.log(u) + (b - 1.0) * jnp.log1p(-u) - betaln(a, b)


def beta_entropy(a, b):
    return betaln(a, b) - (a - 1.0) * digamma(a) - (b - 1.0) * digamma(b) + (a + b - 2.0) * digamma(a + b)


def sample_u(key, a, b):
    return jax.random.beta(key, a, b).astype(jnp.float32)


def beta_kl(a1, b1, a2, b2):
    """KL(Beta(a1, b1) || Beta(a2, b2)) in nats: ln B(a2, b2) - ln B(a1, b1) + (a1 - a2) psi(a1) + (b1 - b2) psi(b1)
    + (a2 - a1 + b2 - b1) psi(a1 + b1)."""
    return (
        betaln(a2, b2)
        - betaln(a1, b1)
        + (a1 - a2) * digamma(a1)
        + (b1 - b2) * digamma(b1)
        + (a2 - a1 + b2 - b1) * digamma(a1 + b1)
    )


def bins_mass(a, b, edges_u):
    """Each image's probability of each bin of u between edges_u [num_bins + 1] (the time domain's unit_edges: the
    bins of t of the timestep histogram): a, b: [N] -> [N, num_bins]."""
    cdf = betainc(a[:, None], b[:, None], edges_u[None, :])
    return jnp.diff(cdf, axis=1)
