"""The test likelihood of a run's parameters in bits/dim (process.nll_bpd; its protocol, process.bound_protocol, is
written next to it): on the DDPM chain the full variational bound (sum of L_t over all T timesteps, each with its own
noise, plus the prior term; improved-diffusion's calc_bpd_loop with clip_denoised), for vp VDM's ELBO, for flow the
probability-flow ODE's likelihood; float32. With config.eval.bound_strata > 0 (DDPM, vp) the bound's unbiased
stratified estimate instead, its standard error next to it as estimate_stderr (stratified_bound); with num_t > 0
(the periodic evaluation) the estimate from num_t stratified timesteps.

`setup` is the run's training.setup.Setup, handed in by the driver: its process, network function (predict_fn),
mesh and shardings.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from core import progress
from core.traces import TRACES
from data import load_split


def bound_space(setup) -> dict:
    """Where the bound lives: pixels (the papers' bits/dim) or a first stage's latents (not comparable)."""
    c = setup.config
    out = {}
    if setup.conditional:
        out["conditional"] = "on the true class of each test image"
    if setup.latent:
        out["space"] = (
            f"LATENT: bits per latent dimension of the {c.data.image_size}x{c.data.image_size}x{c.data.channels} "
            "latents (data scaled by the autoencoder's factor; the decoder at t=0 treats them as 8-bit), "
            "not the pixel bits/dim of the paper tables"
        )
    return out


def bound_fn(setup, num_t: int = 0):
    """fn(params, x_u8 [B, H, W, C], key) -> [B] bits/dim per image: the full bound (num_t = 0) or its estimate from
    num_t stratified timesteps; jitted once (and traced once per batch shape)."""
    chunk_rows = setup.config.eval.chunk_rows

    def make():
        apply = setup.predict_fn(jnp.float32)
        clip = not setup.latent  # latents are not bounded: no clipping of x0-predictions

        def batch_nll(params, x_u8, key, y=None):
            TRACES[("bound", num_t, x_u8.shape)] += 1
            process = setup.process.bind(params)
            # the process folds timesteps into rows batch-major (gaussian.fold_timesteps: image b's k rows are
            # adjacent), so row r belongs to image r // k
            fn = lambda x, t: apply(params, x, t, None, None if y is None else jnp.repeat(y, x.shape[0] // y.shape[0]))
            x = process.data_in(x_u8)
            if num_t:
                return process.nll_bpd_estimate(fn, x, key, num_t, pixels=clip, max_rows=chunk_rows)
            return process.nll_bpd(fn, x, key, pixels=clip, max_rows=chunk_rows)[0]

        return jax.jit(batch_nll)

    return setup.cached(("bound", num_t, chunk_rows), make)


def _ceil_div(a, b):
    return -(-a // b)


def over_batches(setup, images_u8, call, labels=None, desc: str = ""):
    """call(x, y, i) -> a pytree of [B, ...] device arrays for each batch of images_u8 [N, H, W, C] (x: the batch,
    sharded; y: its labels [B] or None; i: the index of its first image), each gathered from every process and
    concatenated over the batches, the padding dropped: the pytree of [N, ...] host arrays. As few equal batches of
    at most eval.batch_size as cover N (one compiled shape, little padding), each a multiple of the device count;
    every process passes the same images and puts its share of every batch on its devices. `desc`: the phase's
    progress bar (core/progress.py), none if empty."""
    from jax.experimental import multihost_utils

    c = setup.config
    N, n_dev = len(images_u8), setup.mesh.shape["data"]
    B = _ceil_div(_ceil_div(N, _ceil_div(N, c.eval.batch_size)), n_dev) * n_dev
    P, p = jax.process_count(), jax.process_index()
    out = []
    bar = progress.bar(N, desc, unit="image", enabled=bool(desc) and p == 0)
    for i in range(0, N, B):

        def local(a):
            a = a[i : i + B]
            a = np.concatenate([a, np.repeat(a[:1], B - len(a), axis=0)]) if len(a) < B else a
            return jax.make_array_from_process_local_data(setup.batch_sharding, a[p * B // P : (p + 1) * B // P])

        n = len(images_u8[i : i + B])
        y = None if labels is None else local(np.asarray(labels, np.int32))
        gather = lambda a: np.asarray(multihost_utils.process_allgather(a, tiled=True))[:n]
        out.append(jax.tree.map(gather, call(local(images_u8), y, i)))
        bar.update(n)
    bar.close()
    return jax.tree.map(lambda *a: np.concatenate(a), *out)


def bound_bpd(setup, params, images_u8, key, num_t: int = 0, labels=None, desc: str = ""):
    """(mean bits/dim, per-image bits/dim [N], seconds) of the full bound over images_u8 [N, H, W, C] (a latent
    model's latents: then per latent dimension), or with num_t > 0 of its unbiased estimate from num_t stratified
    timesteps (the process's nll_bpd_estimate). A class-conditional model's bound is conditional on the true
    labels [N]. Batch i (its first image's index) draws with fold_in(key, i)."""
    batch_nll = bound_fn(setup, num_t)
    t0 = time.perf_counter()
    per_image = over_batches(
        setup, images_u8, lambda x, y, i: batch_nll(params, x, jax.random.fold_in(key, i), y), labels, desc
    )
    return float(per_image.mean()), per_image, time.perf_counter() - t0


def strata_fn(setup, strata: int, per_stratum: int, decoder_draws: int):
    """fn(params, x_u8 [B, H, W, C], t_key, key, y) -> (decoder [B, d], parts [B, K, m], exact [B]) of the
    process's nll_bpd_strata, jitted once (and traced once per batch shape)."""
    chunk_rows = setup.config.eval.chunk_rows
    design = (strata, per_stratum, decoder_draws)

    def make():
        apply = setup.predict_fn(jnp.float32)
        clip = not setup.latent

        def batch_strata(params, x_u8, t_key, key, y=None):
            TRACES[("bound_strata", design, x_u8.shape)] += 1
            process = setup.process.bind(params)
            fn = lambda x, t: apply(params, x, t, None, None if y is None else jnp.repeat(y, x.shape[0] // y.shape[0]))
            return process.nll_bpd_strata(
                fn, process.data_in(x_u8), t_key, key, *design, pixels=clip, max_rows=chunk_rows
            )

        return jax.jit(batch_strata)

    return setup.cached(("bound_strata", design, chunk_rows), make)


def stratified_bound(
    setup, params, images_u8, key, strata, per_stratum, decoder_draws, labels=None, desc: str = ""
) -> dict:
    """The stratified estimate of the bound over images_u8 [N, ...] with its standard error (eval.bound_strata).

    The process takes its decoder term apart (d draws of its noise) and cuts the rest of the bound into K strata of
    t with m draws in each (nll_bpd_strata): the same times for every image (from one key for the whole
    evaluation, so that each draw's mean over the images is one draw of the stratum's share of the mean bound),
    each image and row with noise of its own (batch i: fold_in(noise key, i)). With strata_summary's formulas, the
    value is unbiased for the full bound on these images, and estimate_stderr is its stratified-sampling standard
    error about the full bound's expectation over the noise on these images (timesteps and noise both in it);
    stderr is, as for the full bound, the spread of the per-image values over the images (what another set of
    test images would change). Returns dict(value, estimate_stderr, stderr, per_image [N], seconds)."""
    fn = strata_fn(setup, strata, per_stratum, decoder_draws)
    t_key, noise_key = jax.random.split(key)
    t0 = time.perf_counter()
    decoder, parts, exact = over_batches(
        setup, images_u8, lambda x, y, i: fn(params, x, t_key, jax.random.fold_in(noise_key, i), y), labels, desc
    )
    per_image, value, se = strata_summary(decoder, parts, exact)
    N = len(per_image)
    return dict(
        value=value,
        estimate_stderr=se,
        stderr=float(per_image.std(ddof=1) / np.sqrt(N)) if N > 1 else None,
        per_image=per_image,
        seconds=time.perf_counter() - t0,
    )


def strata_summary(decoder, parts, exact):
    """(per_image [N], value, estimate_stderr) of nll_bpd_strata's decoder [N, d], parts [N, K, m] and exact [N].
    With dbar[j] and cbar[k, j] the means over the N images of decoder[:, j] and parts[:, k, j]:

        value = mean(exact) + mean_j dbar[j] + sum_k mean_j cbar[k, j]
        estimate_stderr^2 = var_j(dbar) / d + sum_k var_j(cbar[k, :]) / m      (var with d - 1, m - 1 dof)

    the variance of stratified sampling: independent draws within a stratum, the strata independent."""
    decoder, parts = np.asarray(decoder, np.float64), np.asarray(parts, np.float64)
    per_image = np.asarray(exact, np.float64) + decoder.mean(axis=1) + parts.mean(axis=2).sum(axis=1)
    var = decoder.mean(axis=0).var(ddof=1) / decoder.shape[1]
    var += parts.mean(axis=0).var(axis=1, ddof=1).sum() / parts.shape[2]
    return per_image, float(per_image.mean()), float(np.sqrt(var))


def test_data(setup, n: int, split: str = "test"):
    """(data [n, ...], labels [n] or None) of the first n images of the test split (-1: all; or of `split`): images,
    a latent model's latents, or token sequences; labels when the model is class-conditional."""
    test = load_split(setup.config.data, split)
    n = len(test) if n == -1 else min(n, len(test))
    if setup.conditional:
        return test.get_labelled(np.arange(n))
    return test.get(np.arange(n)), None


def eval_bound(setup, params, images, key, labels=None) -> dict:
    """--mode=eval's nll_bpd record: the full bound (eval.bound_strata = 0), or its stratified estimate with the
    estimate's standard error next to the value (stratified_bound); stderr is the spread over the images."""
    c, n = setup.config, len(images)
    common = dict(split="test", images=int(n))
    if c.eval.bound_strata:
        design = (c.eval.bound_strata, c.eval.bound_per_stratum, c.eval.bound_decoder_draws)
        est = stratified_bound(setup, params, images, key, *design, labels, desc="eval: test bound (estimate)")
        how = setup.process.strata_protocol(*design)
        return dict(
            value=est["value"],
            estimate_stderr=est["estimate_stderr"],
            stderr=est["stderr"],
            protocol=dict(
                common,
                **how,
                errors="estimate_stderr: the estimate's standard error about the full bound on these images (its "
                "timesteps and noise; stratified sampling's, from the draws within each stratum); stderr: the spread "
                "over the test images",
                parameters="EMA",
                seconds=est["seconds"],
                **bound_space(setup),
            ),
        )
    nll, per_image, seconds = bound_bpd(setup, params, images, key, labels=labels, desc="eval: test bound")
    return dict(
        value=nll,
        stderr=float(per_image.std(ddof=1) / np.sqrt(n)) if n > 1 else None,
        protocol=dict(
            common, **setup.process.bound_protocol(), parameters="EMA", seconds=seconds, **bound_space(setup)
        ),
    )
