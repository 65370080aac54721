"""--mode=eval: `python main.py --mode=eval --workdir=DIR` evaluates DIR's latest checkpoint (EMA parameters).

Writes DIR/eval/step_NNNNNNN.json, each number next to its protocol, and a sample grid DIR/eval/samples_NNNNNNN.png.
- nll_bpd: the process's test likelihood in bits/dim (evaluation/bound.py), averaged over config.eval.nll_images
  images of the test split (-1: all of them), on the EMA parameters.
- fid / kid: config.eval.fid.num_samples generated images (config.eval.fid.method) against the dataset's reference
  in the feature space of evaluation/features.py (evaluation/quality.py); next to them the test split's own FID/KID
  against the same reference (the score of real unseen images, at the test split's size).
`summary(record)` is the lines main.py prints.
"""

import json
import os
import sys

import jax
import numpy as np

from config.registry import LIKELIHOOD
from config.validate import ConfigError, check_workdir
from core import fingerprint, progress
from data import data_fingerprints, pixel_split
from diffusion import PROCESSES
from diffusion.base import Sampling
from diffusion.generate import generate
from evaluation.bound import eval_bound, test_data
from evaluation.quality import feature_space, guidance_protocol, sample_quality
from training import checkpoint as ckpt
from training import report
from training.lock import holder
from training.setup import build

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
            why = fingerprint.without_paths(str(e))  # a record names no path of the machine
            no_pixels = f"the test split's images cannot be read ({type(e).__name__}: {why})"
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


def summary(record: dict) -> str:
    """The lines main.py prints of evaluate's record: the test NLL with its protocol, FID/KID, the record's path."""
    nll = record["nll_bpd"]
    proto = nll["protocol"]
    how = f"all {proto['timesteps']} timesteps" if "timesteps" in proto else proto["bound"].split(":")[0]
    rel = "<=" if "not a bound" not in proto["bound"] else "~"  # the ODE likelihood is an estimate, not a bound
    # a process on tokens names its units (bits per token: per character on a character corpus)
    unit, items = (proto["units"], "sequences") if "units" in proto else ("bits/dim", "images")
    if "strata" in proto:  # an unbiased estimate of the bound, with its own standard error
        rel = "~"
        se = nll["estimate_stderr"]
        how = (
            f"{proto['strata']} strata x {proto['per_stratum']}, decoder x {proto['decoder_draws']}: "
            f"+- {se:.4f} of the full bound"
        )
    return (
        f"checkpoint {record['checkpoint_step']}: test NLL {rel} {nll['value']:.4f} {unit} "
        f"(+- {nll['stderr'] or 0:.4f}, {proto['images']} {items}, {how}, {proto['seconds']:.1f} s)"
        + _fid_line(record.get("fid", {}))
        + (f"\nResults: {record['path']}" if "path" in record else "")
    )


def _fid_line(fid):
    if fid.get("fid") is None:
        return f"\nFID: none ({fid.get('reason')})" if fid else ""
    p, real = fid["protocol"], fid.get("test_split", {})
    kid = f", KID {fid['kid']:.4f} +- {fid['kid_std']:.4f}" if "kid" in fid else ""
    floor = f"; the test split's {real['images']} images: FID {real['fid']:.3f}" if real else ""
    return (
        f"\nFID {fid['fid']:.3f}{kid} ({p['samples']} samples, {p['method']} {p['steps']} steps, "
        f"{p['feature_space']} features{floor}; {p['seconds']:.1f} s)"
    )
