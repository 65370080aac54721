"""Sample quality: FID/KID of a run's samples (diffusion/generate.py) in the feature space of evaluation/features.py,
with the protocol next to the numbers. `setup` is the run's training.setup.Setup, handed in by the driver."""

import time

import jax
import numpy as np

from core import fingerprint, progress
from diffusion.base import Sampling
from diffusion.generate import generate
from evaluation.features import fid_unavailable_reason, make_feature_space


def guidance_protocol(setup, scale) -> dict:
    """How samples of a class-conditional model were drawn (nothing for an unconditional one)."""
    k = setup.num_classes
    if not k:
        return {}
    return dict(classes=f"balanced: sample i has class i mod {k}", guidance_scale=float(scale))


def feature_space(setup):
    """(the FID feature space or None, why there is none): none for a process that does not sample."""
    if not isinstance(setup.process, Sampling):
        return None, f"config.diffusion.name={setup.config.diffusion.name!r} does not sample (diffusion.base.Sampling)"
    space = make_feature_space(setup.config)
    return space, None if space is not None else fid_unavailable_reason(setup.config)


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
        fingerprint=fid_fingerprint(setup, space),
    )
    return scores, samples


def fid_fingerprint(setup, space) -> dict:
    """The content hashes an FID of this setup is measured with: the feature network and its reference, and for a
    latent model the decoder its samples pass through (a different autoencoder is a different metric)."""
    decoder = setup.decoder_fingerprint if setup.latent else None
    return dict(space.fingerprint, **({"decoder": decoder} if decoder else {}))


TAG_DIGITS = 8  # hex digits of fid_tag: 32 bits, enough to tell the few feature spaces of a project apart


def fid_tag(fp: dict) -> str:
    """The short name of an FID's measure (fid_fingerprint: the feature network, its reference, a latent model's
    decoder) that the periodic evaluation puts in its metrics' names (periodic/fid_N250/<tag>): an FID measured
    another way is another metric, also where a log is read without fingerprints.json."""
    return fingerprint.of_fields(fp)[:TAG_DIGITS]
