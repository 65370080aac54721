"""Log-likelihood through an ODE by the instantaneous change of variables (Chen et al. 2018; FFJORD, Grathwohl et
al. 2019; Song et al. 2021's score_sde `likelihood.py`):

    log p_0(x_0) = log p_1(x_1) + int_{t0}^{1} div v(x_t, t) dt,   dx_t/dt = v(x_t, t),

integrated from the data (t0) to t = 1, where p_1 is the process's prior (`prior_logp`; N(0, I) by default, a
variance-exploding process's N(0, sigma_max^2 I) in diffusion/edm.py). The divergence is estimated by Hutchinson's
estimator div v = E_z[z^T (dv/dx) z] with one Rademacher probe z per image, the same z along the whole path (as
FFJORD and score_sde), through one forward-mode product (jax.jvp) per evaluation; `exact_trace=True` computes the
trace exactly instead (one jvp per dimension: small data and tests). The ODE is integrated with Heun's method
(explicit trapezoidal rule, second order) on `steps` even steps, the divergence alongside x. score_sde uses an
adaptive RK45 (scipy, rtol = atol = 1e-5); a fixed grid keeps the computation one jitted program with a known
cost; its error is measured against closed forms in tests/test_continuous.py.
"""

import math

import jax
import jax.numpy as jnp


def _sum_flat(x):
    return jnp.sum(x, axis=tuple(range(1, x.ndim)))


def divergence(field, x, t, z=None):
    """(v(x, t), div_x v(x, t) [B]): Hutchinson's estimate with probe z [like x], or exact when z is None.
    `field(x, t)` acts on a batch whose examples are independent (the divergence is per example)."""
    if z is not None:
        v, jz = jax.jvp(lambda y: field(y, t), (x,), (z,))
        return v, _sum_flat(jz * z)
    shape = x.shape[1:]
    D = math.prod(shape)
    v = field(x, t)

    def diag(i):
        e = jnp.zeros((D,), x.dtype).at[i].set(1.0).reshape(shape)
        e = jnp.broadcast_to(e, x.shape)
        return _sum_flat(jax.jvp(lambda y: field(y, t), (x,), (e,))[1] * e)

    return v, jnp.sum(jax.lax.map(diag, jnp.arange(D)), axis=0)


def standard_normal_logp(x):
    """log N(x; 0, I) [B] in nats of a batch x [B, ...]."""
    D = math.prod(x.shape[1:])
    return -0.5 * _sum_flat(x**2) - 0.5 * D * math.log(2 * math.pi)


def ode_log_likelihood(field, x0, key, steps: int, *, t0: float = 0.0, exact_trace: bool = False, prior_logp=None):
    """log p_0(x0) [B] in nats for the ODE dx/dt = field(x, t) (t a scalar), p_1 = prior_logp (x [B, ...] -> [B];
    None: N(0, I))."""
    z = None if exact_trace else jax.random.rademacher(key, x0.shape, jnp.float32)
    h = (1.0 - t0) / steps

    def body(carry, i):
        x, div_int = carry
        t = t0 + i * h
        v1, d1 = divergence(field, x, t, z)
        x_e = x + h * v1
        v2, d2 = divergence(field, x_e, t + h, z)
        return (x + 0.5 * h * (v1 + v2), div_int + 0.5 * h * (d1 + d2)), None

    (x1, div_int), _ = jax.lax.scan(body, (x0, jnp.zeros(x0.shape[:1], jnp.float32)), jnp.arange(steps))
    return (prior_logp or standard_normal_logp)(x1) + div_int
