"""Reference statistics of a dataset for FID/KID in the FID Inception's feature space.

    python -m evaluation.reference --config=configs/cifar10.py:linear,uniform \\
        --config.eval.fid.inception_weights=/path/pt_inception-2015-12-05-6726825d.pth --output=cifar10_train.npz

Reads the config's dataset (config.data.*) split --split (train by default; all of it, or --max_images), runs the
FID InceptionV3 on the uint8 images and writes an .npz: mu [2048], sigma [2048, 2048] (ddof 1, as pytorch-fid's
--save-stats), features [N, 2048] (for KID; --no_features leaves them out), and dataset, split, image_size,
num_images, weights. Point config.eval.fid.reference_stats at it. pytorch-fid's own .npz (mu, sigma) works as well
(no KID then). An existing --output is not overwritten.
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from core import progress

FLAGS = flags.FLAGS


def _define_flags():  # only when run as a program: importing write_reference defines no flags
    config_flags.DEFINE_config_file("config", "configs/default.py", "The run's config (its data and eval.fid fields).")
    flags.DEFINE_string("output", None, "Where the .npz goes.", required=True)
    flags.DEFINE_string("split", "train", "Dataset split.")
    flags.DEFINE_integer("max_images", -1, "Images (the first N of the split; -1: all).")
    flags.DEFINE_bool("no_features", False, "Write mu and sigma only (no KID against these statistics).")


def write_reference(config, output: str, split: str = "train", max_images: int = -1, features: bool = True) -> dict:
    """Compute and write the reference statistics (see the module docstring); returns what was written.
    Raises FileExistsError rather than overwrite `output`."""
    import numpy as np

    from data import load_split
    from evaluation import frechet, inception

    if os.path.exists(output):
        raise FileExistsError(f"--output={output} exists; not overwriting it")
    source = load_split(config.data, split)
    n = len(source) if max_images < 0 else min(max_images, len(source))
    fn = inception.make_feature_fn(inception.load_weights(config.eval.fid.inception_weights))
    feats = []
    with progress.bar(n, f"reference statistics ({split})", unit="image") as bar:
        for i in range(0, n, 1000):
            feats.append(fn(source.get(np.arange(i, min(n, i + 1000))), tick=bar.update))
    f = np.concatenate(feats)
    mu, sigma = frechet.statistics(f)
    out = dict(
        mu=mu,
        sigma=sigma,
        dataset=config.data.name,
        split=split,
        image_size=config.data.image_size,
        num_images=n,
        weights=os.path.basename(config.eval.fid.inception_weights),
    )
    if features:
        out["features"] = f.astype(np.float32)
    tmp = output + ".tmp.npz"
    np.savez(tmp, **out)
    os.replace(tmp, output)
    return out


def main(argv):
    del argv
    from core.torch_file import NotAStateDict

    c = FLAGS.config
    from core.compilation_cache import configure_compilation_cache
    from core.host_malloc import configure_host_malloc

    configure_compilation_cache(c)
    configure_host_malloc(c)
    if not c.eval.fid.inception_weights or not os.path.isfile(c.eval.fid.inception_weights):
        print(
            f"error: config.eval.fid.inception_weights={c.eval.fid.inception_weights!r}: no such file (pytorch-fid's "
            f"pt_inception-2015-12-05-6726825d.pth; docs/evaluation.md#fid-and-kid)",
            file=sys.stderr,
        )
        return 2
    try:
        out = write_reference(c, FLAGS.output, FLAGS.split, FLAGS.max_images, not FLAGS.no_features)
    except (FileExistsError, NotAStateDict) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Reference statistics of {out['num_images']} {c.data.name} {FLAGS.split} images: {FLAGS.output}")
    return 0


if __name__ == "__main__":
    _define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
