"""Univariate F-statistic feature selection on device (sklearn's SelectKBest(f_regression), docs/method.md#choosing-s).

F_j = r_j^2 / (1 - r_j^2) * (n - 2), r_j the Pearson correlation of column j of X with y over the n valid rows.
As in sklearn's f_regression(force_finite=True): an undefined F (a constant column, or constant y) is 0, and
|r| = 1 gives the largest float. Ties are broken as SelectKBest does (its stable argsort keeps the highest
indices), so the selected set equals sklearn's.
"""

import jax
import jax.numpy as jnp


def f_statistic(X, y, valid):
    """X: [N, K], y: [N], valid: [N] bool (rows of the ring buffer filled so far). Returns F: [K] float32."""
    w = valid.astype(X.dtype)
    n = jnp.sum(w)
    xm = jnp.sum(X * w[:, None], 0) / jnp.maximum(n, 1.0)
    ym = jnp.sum(y * w) / jnp.maximum(n, 1.0)
    xc = (X - xm) * w[:, None]
    yc = (y - ym) * w
    num = yc @ xc
    xn = jnp.sqrt(jnp.sum(xc**2, 0))
    # a column constant up to float rounding of its mean is constant: F undefined
    xn = jnp.where(xn <= 1e-6 * jnp.sqrt(jnp.sum((X * w[:, None]) ** 2, 0)), 0.0, xn)
    r = num / (xn * jnp.sqrt(jnp.sum(yc**2)))
    r2 = r**2
    f = r2 / (1.0 - r2) * (n - 2.0)
    big = jnp.finfo(X.dtype).max
    f = jnp.where(jnp.isclose(r2, 1.0), big, f)
    return jnp.where(jnp.isnan(f), 0.0, f)


def top_k_highest(f, k: int):
    """Indices [k] (ascending) of the k largest entries of f, ties broken towards the highest index (SelectKBest)."""
    K = f.shape[0]
    _, idx_rev = jax.lax.top_k(f[::-1], k)  # top_k prefers the lowest index among ties; reversed -> highest
    return jnp.sort(K - 1 - idx_rev)


def select_k_best(X, y, valid, k: int):
    """Indices [k] (ascending) of the k columns with the highest F."""
    return top_k_highest(f_statistic(X, y, valid), k)
