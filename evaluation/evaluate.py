"""Evaluation of a workdir's latest checkpoint (EMA parameters): `python main.py --mode=eval --workdir=DIR`.

Writes DIR/eval/step_NNNNNNN.json, each number next to its protocol, and a sample grid DIR/eval/samples_NNNNNNN.png.
- nll_bpd: the process's test likelihood in bits/dim (process.nll_bpd; its protocol, process.bound_protocol, is
  written next to it): on the DDPM chain the full variational bound (sum of L_t over all T timesteps, each with its
  own noise, plus the prior term; improved-diffusion's calc_bpd_loop with clip_denoised), for vp VDM's ELBO, for
  flow the probability-flow ODE's likelihood; averaged over config.eval.nll_images images of the test split (-1: all
  of them), float32, on the EMA parameters. With config.eval.bound_strata > 0 (DDPM, vp) the bound's unbiased
  stratified estimate instead, its standard error next to it as estimate_stderr (stratified_bound).
- fid / kid: config.eval.fid.num_samples generated images (config.eval.fid.method) against the dataset's reference
  in the feature space of evaluation/features.py; next to them the test split's own FID/KID against the same
  reference (the score of real unseen images, at the test split's size).

PeriodicEval: the cheap version run every config.eval.periodic.every training steps (an unbiased stratified estimate
of the bound, FID/KID on few samples), with the same noise, timesteps and sample seeds at every evaluation and in
every run (common random numbers: differences between steps and runs are not evaluation noise).
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from config.registry import LIKELIHOOD
from config.validate import ConfigError, check_workdir
from core import fingerprint, progress
from data import DATASETS, data_fingerprints, load_split, pixel_split
from diffusion import PROCESSES
from diffusion.base import Likelihood, Sampling
from evaluation.features import fid_unavailable_reason, make_feature_space
from evaluation.generate import generate
from training import checkpoint as ckpt
from training import report
from training.lock import holder
from training.setup import TRACES, build
from training.step import make_apply

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the code's revision is read here


class NoCheckpoint(ConfigError):
    pass


def restore_latest(setup, workdir):
    """(step, state) of the latest checkpoint, after checking that the workdir holds one of this config's run."""
    if "://" not in workdir and not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise NoCheckpoint(
            f"--workdir={workdir} has no checkpoints/ to evaluate: train first, or point --workdir at a training run"
        )
    mngr = ckpt.make_manager(setup.config, workdir)
    try:
        step = mngr.latest_step()
        if step is None:
            raise NoCheckpoint(f"--workdir={workdir} has no complete checkpoint to evaluate: train first")
        ckpt.check_run_identity(setup.config, workdir)  # the bound depends on the run's schedule, target, variance
        abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
        return step, ckpt.restore(mngr, step, abstract, workdir)
    finally:
        mngr.close()


def guidance_protocol(setup, scale) -> dict:
    """How samples of a class-conditional model were drawn (nothing for an unconditional one)."""
    k = setup.num_classes
    if not k:
        return {}
    return dict(classes=f"balanced: sample i has class i mod {k}", guidance_scale=float(scale))


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
        apply = make_apply(setup.model.clone(dtype=jnp.float32))
        clip = not setup.latent  # latents are not bounded: no clipping of x0-predictions

        def batch_nll(params, x_u8, key, y=None):
            TRACES[("bound", num_t, x_u8.shape)] += 1
            process = setup.process.bind(params)
            # the process folds timesteps into rows batch-major (gaussian.fold_timesteps: image b's k rows are
            # adjacent), so row r belongs to image r // k
            fn = lambda x, t: apply(params, x, t, None, None if y is None else jnp.repeat(y, x.shape[0] // y.shape[0]))
            x = process.data_in(x_u8)
            if num_t:
                return process.nll_bpd_estimate(fn, x, key, num_t, clip_denoised=clip, max_rows=chunk_rows)
            return process.nll_bpd(fn, x, key, clip_denoised=clip, max_rows=chunk_rows)[0]

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
        apply = make_apply(setup.model.clone(dtype=jnp.float32))
        clip = not setup.latent

        def batch_strata(params, x_u8, t_key, key, y=None):
            TRACES[("bound_strata", design, x_u8.shape)] += 1
            process = setup.process.bind(params)
            fn = lambda x, t: apply(params, x, t, None, None if y is None else jnp.repeat(y, x.shape[0] // y.shape[0]))
            return process.nll_bpd_strata(
                fn, process.data_in(x_u8), t_key, key, *design, clip_denoised=clip, max_rows=chunk_rows
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


def sample_quality(setup, space, params, key, num, method, steps, guidance: float = 1.0, desc: str = "") -> dict:
    """FID/KID of `num` samples (a collective: every process calls it) and the protocol. A class-conditional
    model draws balanced classes (sample i: class i mod K) with classifier-free guidance `guidance`. `desc`: the
    name of the progress bars of its sampling and its features (none if empty)."""
    c = setup.config
    t0 = time.perf_counter()
    B = c.eval.fid.batch_size  # samples per sampling call (memory): chunk i draws with fold_in(key, i)
    shown = bool(desc) and jax.process_index() == 0
    bar = progress.bar(num, f"{desc} samples ({method})", unit="image", enabled=shown)
    if num <= B:
        samples = generate(setup, params, key, num, method, steps, guidance)
        bar.update(num)
    else:
        chunks = []
        for i in range(-(-num // B)):
            n = min(B, num - i * B)
            chunks.append(generate(setup, params, jax.random.fold_in(key, i), n, method, steps, guidance, i * B))
            bar.update(n)
        samples = np.concatenate(chunks)
    bar.close()
    with progress.bar(num, f"{desc} features", unit="image", enabled=shown) as bar:
        scores = space.score(samples, c.eval.fid.kid_subsets, c.eval.fid.kid_subset_size, tick=bar.update)
    scores["protocol"] = dict(
        samples=int(num),
        method=method,
        steps=setup.process.sampling_steps(method, steps),
        parameters="EMA",
        **guidance_protocol(setup, guidance),
        feature_space=space.name,
        seconds=time.perf_counter() - t0,
        **space.protocol,
        fingerprint=space.fingerprint,
    )
    return scores, samples


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


def feature_space(setup):
    """(the FID feature space or None, why there is none): none for a process that does not sample."""
    if not isinstance(setup.process, Sampling):
        return None, f"config.diffusion.name={setup.config.diffusion.name!r} does not sample (diffusion.base.Sampling)"
    space = make_feature_space(setup.config)
    return space, None if space is not None else fid_unavailable_reason(setup.config)


def evaluate(config, workdir: str) -> dict:
    """Evaluate the latest checkpoint in `workdir`; returns the record written to DIR/eval/step_N.json."""
    name = config.diffusion.name
    if LIKELIHOOD not in PROCESSES[name].offers(config.diffusion):
        raise ConfigError(
            f"--mode=eval is not allowed with config.diffusion.name={name!r}: it reports the test likelihood, which "
            "the process does not offer (diffusion.base.Likelihood)"
        )
    if "://" not in workdir:
        workdir = os.path.abspath(workdir)
        if os.path.isdir(os.path.join(workdir, "checkpoints")):  # else restore_latest says there is nothing to read
            check_workdir(workdir, "eval")  # the results go there: refused before anything compiles
    setup = build(config)
    c = config
    step, state = restore_latest(setup, workdir)
    running = holder(workdir)  # evaluation only reads: it may run beside training, and says so
    if running and jax.process_index() == 0:
        print(
            f"note: a run is writing --workdir={workdir} ({running}); evaluating checkpoint {step}, its newest "
            "complete one now",
            file=sys.stderr,
            flush=True,
        )
    space, no_space = feature_space(setup)  # before the long bound: a bad weights or statistics file stops here
    # the real images FID's test-split line scores (a latent model's: its source dataset's), opened before sampling
    pixels, no_pixels = None, None
    if space is not None:
        try:
            pixels = pixel_split(c.data, "test")
        except Exception as e:  # a dataset without a test split (tfds' celeb_a_hq): FID itself does not need it
            no_pixels = f"the test split's images cannot be read ({type(e).__name__}: {e})"
    key = jax.random.fold_in(jax.random.PRNGKey(c.seed), 0xE7A1)
    images, labels = test_data(setup, c.eval.nll_images)
    record = dict(
        checkpoint_step=int(step),
        workdir=os.path.basename(workdir.rstrip("/")),  # its name: a machine's path means nothing on the next
        dataset=c.data.name,
        fingerprints=dict(data=data_fingerprints(c.data), **fingerprint.environment(ROOT)),
        nll_bpd=eval_bound(setup, state.ema_params, images, key, labels),
    )
    if space is None:
        record["fid"] = dict(value=None, reason=no_space)
    else:
        f = c.eval.fid
        scores, _ = sample_quality(
            setup,
            space,
            state.ema_params,
            jax.random.fold_in(key, 2),
            f.num_samples,
            f.method,
            f.steps,
            f.guidance_scale,
            desc="eval: FID",
        )
        if pixels is None:
            scores["test_split_unavailable"] = no_pixels
        else:
            m = min(len(pixels), f.num_samples)
            with progress.bar(m, "eval: FID of the test split", unit="image", enabled=jax.process_index() == 0) as bar:
                real = space.score(pixels.get(np.arange(m)), f.kid_subsets, f.kid_subset_size, tick=bar.update)
            scores["test_split"] = dict(
                real,
                images=m,
                note="the first min(test split, eval.fid.num_samples) test "
                "images scored against the same reference: what real unseen images get",
            )
        record["fid"] = scores
    sampling = isinstance(setup.process, Sampling)
    samples = generate(setup, state.ema_params, jax.random.fold_in(key, 1), c.eval.num_samples) if sampling else None
    if jax.process_index() == 0:
        out = os.path.join(workdir, "eval")
        os.makedirs(out, exist_ok=True)
        if sampling:  # a process that does not sample has no grid (nor FID: record["fid"] says why)
            grid = report.save_samples(c.data, samples, os.path.join(out, f"samples_{step:07d}"))
            record["samples"] = dict(
                path=os.path.relpath(grid, workdir),
                protocol=dict(
                    num=c.eval.num_samples,
                    method=c.sample.method,
                    steps=setup.process.sampling_steps(c.sample.method, c.sample.steps),
                    parameters="EMA",
                    **guidance_protocol(setup, c.sample.guidance_scale),
                ),
            )
        path = os.path.join(out, f"step_{step:07d}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=2)
        os.replace(path + ".tmp", path)
        record["path"] = path
    return record


class PeriodicEval:
    """Every config.eval.periodic.every steps: scalars for metrics.jsonl / TensorBoard, named with their protocol:
    periodic/bpd_T{K} (the stratified bound estimate over K timesteps), periodic/fid_N{N}, periodic/kid_N{N}."""

    KEY = 0x9E71  # fixed, not config.seed: every run is evaluated on the same noise and sample seeds

    def __init__(self, setup):
        c = setup.config
        self.setup, self.p = setup, c.eval.periodic
        # a dataset with a validation split (text, data/text.py) is evaluated there; the test split is --mode=eval's
        self.split = getattr(DATASETS[c.data.name], "periodic_split", "test")
        self.images, self.labels = test_data(setup, self.p.nll_images, self.split)
        self.space = feature_space(setup)[0]
        self.bound = isinstance(setup.process, Likelihood)  # else FID alone (a process may offer either)
        self.key = jax.random.PRNGKey(self.KEY)
        self.prefix = "periodic/"

    def protocol(self) -> dict:
        p = self.p
        return dict(
            nll=None
            if not self.bound
            else f"bpd_T{p.nll_timesteps}: {self.setup.process.estimate_protocol(p.nll_timesteps)} over "
            f"{len(self.images)} {'test images' if self.split == 'test' else self.split + ' examples'}",
            fid=None
            if self.space is None
            else f"fid_N{p.num_samples} / kid_N{p.num_samples}: {p.num_samples} samples ({p.method}"
            f"{f', {p.steps} steps' if self.setup.process.uses_steps(p.method) else ''}) in the "
            f"{self.space.name} space",
            parameters="EMA",
            note="cheap estimates for convergence curves, not --mode=eval numbers",
        )

    def __call__(self, params) -> dict:
        p, t0 = self.p, time.perf_counter()
        out = {}
        if self.bound:
            bpd, _, _ = bound_bpd(self.setup, params, self.images, self.key, num_t=p.nll_timesteps, labels=self.labels)
            out[f"{self.prefix}bpd_T{p.nll_timesteps}"] = bpd
        if self.space is not None:
            scores, _ = sample_quality(
                self.setup,
                self.space,
                params,
                jax.random.fold_in(self.key, 1),
                p.num_samples,
                p.method,
                p.steps,
                self.setup.config.eval.fid.guidance_scale,
            )
            out[f"{self.prefix}fid_N{p.num_samples}"] = scores["fid"]
            if "kid" in scores:
                out[f"{self.prefix}kid_N{p.num_samples}"] = scores["kid"]
        out[f"{self.prefix}seconds"] = time.perf_counter() - t0
        return out
