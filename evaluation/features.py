"""The feature space of FID/KID for a config, and its reference statistics. config.eval.fid.features:

- "auto": the digits (config.data.name digits or digits_tfds) in the digits classifier's space, any other dataset
  in the FID InceptionV3's when config.eval.fid.inception_weights is set, else no FID (the record says why and how
  to enable it).
- "classifier" (digits only): the digits classifier (classifier.py); reference: the 1,500 training digits (features
  kept, so KID is available).
- "inception": the FID InceptionV3 (inception.py) with config.eval.fid.inception_weights; reference:
  config.eval.fid.reference_stats, an .npz with `mu` [2048] and `sigma` [2048, 2048] (pytorch-fid's --save-stats
  format) and, optionally, `features` [N, 2048] for KID, as `python -m evaluation.reference` writes it (with the
  dataset and image size, checked against the config).
"""

import dataclasses
import os
from typing import Callable

import numpy as np

from core import fingerprint
from evaluation import classifier, frechet


def classifier_dataset(config) -> str:
    """The embedded dataset whose classifier scores this config's images (a latent dataset: its source)."""
    from data import DATASETS

    part = DATASETS[config.data.name]
    name = part.source_name(config.data) if hasattr(part, "source_name") else config.data.name
    return classifier.DATASET_OF.get(name, "")


@dataclasses.dataclass
class FeatureSpace:
    name: str  # "digits_classifier" | "inception_v3_pool3"
    features: Callable  # (uint8 [N, H, W, C], tick=None) -> float64 [N, d]; tick(n) after each batch of n
    mu: np.ndarray
    sigma: np.ndarray
    reference_features: np.ndarray | None
    protocol: dict  # what the reference is, weights, classifier accuracy
    # content hashes (core/fingerprint.py): network (the weights features come from), reference (what the reference
    # statistics are computed from: images, or the statistics file's arrays), reference_stats (mu and sigma)
    fingerprint: dict = dataclasses.field(default_factory=dict)

    def score(self, images_u8, kid_subsets=100, kid_subset_size=1000, tick=None) -> dict:
        """FID and KID of images against the reference, with their protocol; tick(n) after each batch of n images'
        features (a progress bar's update)."""
        f = self.features(images_u8, tick=tick)
        mu, sigma = frechet.statistics(f)
        # the network's hash beside the numbers it measured: FIDs of two networks do not compare
        out = dict(fid=frechet.frechet_distance(mu, sigma, self.mu, self.sigma))
        out["feature_network"] = self.fingerprint.get("network", fingerprint.UNKNOWN)
        if self.reference_features is not None:
            m, s, size = frechet.kid(f, self.reference_features, kid_subsets, kid_subset_size)
            out.update(kid=m, kid_std=s, kid_subset_size=size, kid_subsets=kid_subsets)
        return out


def kind(config) -> str | None:
    """ "classifier", "inception" or None (no FID) for the config."""
    f = config.eval.fid
    if f.features == "none":
        return None
    if f.features != "auto":
        return f.features
    if classifier_dataset(config):
        return "classifier"
    return "inception" if f.inception_weights else None


def fid_unavailable_reason(config) -> str | None:
    if kind(config) is not None:
        return None
    if config.eval.fid.features == "none":
        return "config.eval.fid.features='none'"
    return (
        f"no FID for config.data.name={config.data.name!r}: set config.eval.fid.inception_weights (pytorch-fid's "
        f"pt_inception-2015-12-05-6726825d.pth) and config.eval.fid.reference_stats (docs/evaluation.md#fid-and-kid)"
    )


def make_feature_space(config) -> FeatureSpace | None:
    """The config's FeatureSpace, or None when it has none (fid_unavailable_reason says why)."""
    f = config.eval.fid
    if kind(config) == "classifier":
        name = classifier_dataset(config)
        params, acc, scale, origin = classifier.load_or_train(f.classifier_cache, name)
        fn = classifier.make_feature_fn(params, scale, name)
        (train, labels), _ = classifier.dataset_arrays(name)
        ref = fn(train)
        mu, sigma = frechet.statistics(ref)
        return FeatureSpace(
            f"{name}_classifier",
            fn,
            mu,
            sigma,
            ref,
            dict(
                features=f"{name} classifier, {classifier.FEATURE_DIM}-d penultimate layer (evaluation/classifier.py); "
                f"test accuracy {acc:.4f}",
                reference=f"the {len(train)} training images of {name}",
                weights=origin,
            ),
            dict(
                network=classifier.network_fingerprint(params, scale),
                reference=fingerprint.of_arrays(train, labels),  # the split's own hash (data.ArraySource)
                reference_stats=fingerprint.of_arrays(mu, sigma),
            ),
        )
    if kind(config) is None:
        return None
    from evaluation import inception

    with np.load(f.reference_stats) as z:
        mu, sigma = z["mu"], z["sigma"]
        ref = z["features"] if "features" in z.files else None
    fn = inception.make_feature_fn(inception.load_weights(f.inception_weights))
    return FeatureSpace(
        "inception_v3_pool3",
        fn,
        mu,
        sigma,
        ref,
        dict(
            features="FID InceptionV3 pool3 (pytorch-fid weights)",
            weights=os.path.basename(f.inception_weights),
            reference=os.path.basename(f.reference_stats) + ("" if ref is not None else " (mu/sigma only: no KID)"),
        ),
        dict(
            network=fingerprint.of_file(f.inception_weights),
            reference=fingerprint.of_arrays(mu, sigma, *(() if ref is None else (ref,))),
            reference_stats=fingerprint.of_arrays(mu, sigma),
        ),
    )


def check_reference_stats(config):
    """The problem with config.eval.fid.reference_stats as one line, or None: the arrays it must hold, their
    dimension, and the dataset and image size it was made for (when it says)."""
    f = config.eval.fid
    try:
        z = np.load(f.reference_stats)
    except (OSError, ValueError) as e:
        return f"cannot be read as an .npz ({e})"
    with z:
        if "mu" not in z.files or "sigma" not in z.files:
            return f"holds {sorted(z.files)}, not mu and sigma"
        d = z["mu"].shape
        if d != (2048,):
            return f"holds statistics of {d} features; the FID Inception's pool3 has 2048"
        for k, want in (("dataset", config.data.name), ("image_size", config.data.image_size)):
            if k in z.files and z[k].item() != want:
                return (
                    f"was made for {k} {z[k].item()!r}, this config has {want!r}: make this dataset's statistics "
                    f"with `python -m evaluation.reference`"
                )
    return None
