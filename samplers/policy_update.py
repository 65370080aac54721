"""The pure pieces of the learned sampler's policy update (samplers/adaptive.py; docs/method.md#policy-update and
#making-the-policy-learn): functions of arrays, each traced inside the update's branch of the train step.

    probe_rows(x, P)                         every (B / P)-th row of x [B, ...]
    reinforce_loss(logp, ent, A, mask, c, form)   the REINFORCE loss with an entropy term
    baseline_mean(baseline, n, decay)        the bias-corrected running mean of the mean reward
    running_advantage(R, n, mean, var, decay)     A = (R - m) / s over a running mixture of the rewards
    entropy_coef_step(log_c, lr, H, target)  SAC's temperature rule on log c
    trust_region(apply, old, new, x0, kl_max)     a policy step scaled back into a KL ball
    select_by_fstat(X, y, count, S, ...)     the probe times with the highest F-statistics over the sweep buffer
"""

import jax
import jax.numpy as jnp
import numpy as np

from samplers.fstat import f_statistic, top_k_highest
from samplers.policy import beta_kl

ENTROPY_FORMS = ("standard", "reference")
# the automatically tuned entropy coefficient stays in [1e-6, 10] (entropy_control="target")
LOG_COEF_RANGE = (float(np.log(1e-6)), float(np.log(10.0)))
TRUST_HALVINGS = 10  # at most this many halvings of a policy step after its first scaling (trust_kl)


def probe_rows(x, probe: int):
    """Every (B / P)-th row of x [B, ...]: spread evenly over the batch, so each device's shard gives as many."""
    B = x.shape[0]
    return x.reshape((probe, B // probe) + x.shape[1:])[:, 0]


def reinforce_loss(logp, ent, advantage, from_policy, c, form: str):
    """-mean_i log pi_i A_i - c mean_i H_i ("standard"), or the reference's -mean_i log pi_i (A_i + c H_i) with H not
    detached; the log pi terms over the images drawn from the policy only (mask from_policy [P])."""
    mask = from_policy.astype(jnp.float32)
    mean_masked = lambda v: jnp.sum(v * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    if form == "reference":
        return -mean_masked(logp * (advantage + c * ent))
    return -mean_masked(logp * advantage) - c * jnp.mean(ent)


def baseline_mean(baseline, updates, decay: float):
    """The bias-corrected running mean of the mean reward over the previous updates (0 before any, or with decay 0:
    no baseline). baseline is the running mean before correction."""
    if decay == 0:
        return jnp.zeros((), jnp.float32)
    return jnp.where(updates > 0, baseline / (1.0 - decay ** updates.astype(jnp.float32)), 0.0)


def running_advantage(reward, updates, mean, var, decay: float):
    """(A [P], new mean, new variance): the running mixture weighs the rewards of earlier updates (mean, var) by
    decay and this update's (its mean bm, variance bv) by 1 - decay; the first update's are its own."""
    first = updates == 0
    bm, bv = jnp.mean(reward), jnp.var(reward)
    m = jnp.where(first, bm, decay * mean + (1 - decay) * bm)
    v = jnp.where(first, bv, decay * var + (1 - decay) * bv + decay * (1 - decay) * (bm - mean) ** 2)
    return (reward - m) / jnp.maximum(jnp.sqrt(v), 1e-12), m, v


def entropy_coef_step(log_coef, lr: float, entropy, target: float):
    """log c <- log c - lr (H - target), clipped into LOG_COEF_RANGE: c rises while the policy's entropy H is below
    the target (further from uniform), as SAC tunes its temperature."""
    return jnp.clip(log_coef - lr * (entropy - target), *LOG_COEF_RANGE)


def trust_region(apply, old, new, x0, trust_kl: float):
    """new scaled towards old so that the images' mean KL(pi_old || pi_new) <= trust_kl: first by sqrt(trust_kl / KL)
    (the KL of a small step is quadratic in its length), then halved until it holds, at most TRUST_HALVINGS times.
    apply(params, x0) -> (alpha, beta). Returns (params, KL, scale)."""
    a0, b0 = apply(old, x0)
    step = jax.tree.map(lambda n, o: n - o, new, old)
    at = lambda s: jax.tree.map(lambda o, d: o + s * d, old, step)

    def kl(s):
        a, b = apply(at(s), x0)
        return jnp.mean(beta_kl(a0, b0, a, b))

    full = kl(1.0)
    scale = jnp.where(full > trust_kl, jnp.sqrt(trust_kl / jnp.maximum(full, 1e-30)), 1.0)

    def halve(carry):
        s, _, i = carry
        return s / 2, kl(s / 2), i + 1

    scale, value, _ = jax.lax.while_loop(
        lambda c: (c[1] > trust_kl) & (c[2] < TRUST_HALVINGS), halve, (scale, kl(scale), 0)
    )
    return at(scale), value, scale


def select_by_fstat(X, y, count, S, *, grid, selectable, num_selected, min_rows, standardised, skip):
    """(S, F-scores of S): the num_selected grid times with the highest F-statistic over the buffer's valid rows
    (filled and not all zero), once there are min_rows of them; else S unchanged. X [buffer, K] the sweep rows, y
    [buffer] their sums. The F target is y, the sum of the selectable columns (skip: the data end is not
    selectable), or of the selectable columns standardised over the valid rows (a constant column counts 0)."""
    size = X.shape[0]
    filled = jnp.arange(size) < jnp.minimum(count, size)
    valid = filled & jnp.any(X != 0.0, axis=1)
    keep = selectable.astype(X.dtype)
    if standardised:
        w = valid.astype(X.dtype)[:, None]
        n = jnp.maximum(jnp.sum(w), 1.0)
        mean = jnp.sum(X * w, 0) / n
        sd = jnp.sqrt(jnp.sum(((X - mean) * w) ** 2, 0) / n)
        z = jnp.where(sd > 0, (X - mean) / jnp.where(sd > 0, sd, 1.0), 0.0)
        y = jnp.sum(z * keep, axis=1)
    elif skip:
        y = jnp.sum(X * keep, axis=1)
    f = jnp.where(selectable, f_statistic(X, y, valid), -1.0)
    idx = top_k_highest(f, num_selected)
    ready = jnp.sum(valid) >= min_rows
    return jnp.where(ready, grid[idx], S), jnp.where(ready, f[idx], 0.0)
