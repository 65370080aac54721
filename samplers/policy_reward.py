"""The learned sampler's reward rows (samplers/adaptive.py; docs/method.md#reward): what an update of the diffusion
model did to the bound at given times, per probe image. Both run inside the update's branch of the train step, on
the rows function of its StepContext (training/rows.py spreads the rows over the data axis in chunks).

    bound_reduction  KL_s(theta_k) - KL_s(theta_{k+1}) (or the loss's rows with kind="loss"), [N, K]
    credit           the first-order share of that reduction owed to each image's own draw, [N, K]

`scale` is one grid cell's share of the bound (1 on the chain, 1 / grid in continuous time) for the bound's rows;
`dropout` whether the network runs in train mode; `chunk` the rows per device at a time (0: all at once);
`draw_noise(key, x0)` the process's noise for rows x0 (Process.draw_noise: Gaussian for images).
"""

import jax
import jax.numpy as jnp


def bound_reduction(ctx, x0, y, ts, key, *, kind, scale, common_noise, dropout, chunk, draw_noise):
    """KL(theta_k) - KL(theta_{k+1}) at every timestep of ts [K] for every image of x0 [N] (labels y [N] or
    None): [N, K]. The N K rows are laid out image-major (the K rows of an image stay on the device that holds
    it)."""
    N, K = x0.shape[0], ts.shape[0]
    x0r, tr = jnp.repeat(x0, K, axis=0), jnp.tile(ts, N)
    yr = None if y is None else jnp.repeat(y, K, axis=0)
    kn_before, kn_after, kd_before, kd_after = jax.random.split(key, 4)
    if common_noise:
        kn_after, kd_after = kn_before, kd_before

    def kl(params, k_noise, k_dropout):
        noise = draw_noise(k_noise, x0r)
        dropout_key = k_dropout if dropout else None
        terms = ctx.rows_fn(
            params,
            x0r,
            tr,
            noise,
            y=yr,
            dropout_key=dropout_key,
            kind=kind,
            rows_per_device=chunk,
        )
        return terms.reshape(N, K)

    delta = kl(ctx.params_before, kn_before, kd_before) - kl(ctx.params_after, kn_after, kd_after)
    return delta * scale


def credit(ctx, x0, y, t, ts, key, *, kind, scale, dropout, chunk, draw_noise):
    """<grad l_i(theta_k; t_i), grad KL_s(theta_k)> for every probe image i [N] (drawn at t [N] this step) and
    every s of ts [K]: [N, K]. KL_s is the bound's term at s, averaged over the N images (their own noise); l_i
    is image i's training objective w(t_i) MSE (+ extra) with fresh noise, without the sampler's importance
    weight. A step theta - eta grad l_i lowers KL_s by eta times this, to first order (Adam's preconditioning
    left out): the share of the bound's reduction owed to image i's own draw. One gradient per s, one
    forward-mode pass over the images each."""
    N, K = x0.shape[0], ts.shape[0]
    k_rows, k_drop, k_loss, k_loss_drop = jax.random.split(key, 4)
    drop = k_drop if dropout else None
    params = ctx.params_before

    def term(p, s):  # the mean over the images of the bound's term at ts[s] (one grid cell's share)
        noise = draw_noise(jax.random.fold_in(k_rows, s), x0)
        tr = jnp.full((N,), ts[s], ts.dtype)
        rows = ctx.rows_fn(p, x0, tr, noise, kind=kind, y=y, dropout_key=drop, rows_per_device=chunk)
        return jnp.mean(rows) * scale

    loss_noise = draw_noise(k_loss, x0)
    loss_dropout = k_loss_drop if dropout else None
    losses = lambda p: ctx.objective(p, x0, t, loss_noise, loss_dropout, y)[0]
    cols = [jax.jvp(losses, (params,), (jax.grad(term)(params, s),))[1] for s in range(K)]
    return jnp.stack(cols, axis=1)
