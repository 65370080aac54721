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
import time

from absl import app, flags
from ml_collections import config_flags

config_flags.DEFINE_config_file("config", "configs/default.py", "The run's config (its data and eval.fid fields).")
flags.DEFINE_string("output", None, "Where the .npz goes.", required=True)
flags.DEFINE_string("split", "train", "Dataset split.")
flags.DEFINE_integer("max_images", -1, "Images (the first N of the split; -1: all).")
flags.DEFINE_bool("no_features", False, "Write mu and sigma only (no KID against these statistics).")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import numpy as np

    from data import load_split
    from evaluation import frechet, inception

    c = FLAGS.config
    if not c.eval.fid.inception_weights or not os.path.isfile(c.eval.fid.inception_weights):
        print(f"error: config.eval.fid.inception_weights={c.eval.fid.inception_weights!r}: no such file (pytorch-fid's "
              f"pt_inception-2015-12-05-6726825d.pth; README: FID)", file=sys.stderr)
        return 2
    if os.path.exists(FLAGS.output):
        print(f"error: --output={FLAGS.output} exists; not overwriting it", file=sys.stderr)
        return 2
    source = load_split(c, FLAGS.split)
    n = len(source) if FLAGS.max_images < 0 else min(FLAGS.max_images, len(source))
    fn = inception.make_feature_fn(inception.load_weights(c.eval.fid.inception_weights))
    t0, feats = time.perf_counter(), []
    for i in range(0, n, 1000):
        feats.append(fn(source.get(np.arange(i, min(n, i + 1000)))))
        print(f"{min(n, i + 1000)}/{n} images, {time.perf_counter() - t0:.0f} s", flush=True)
    f = np.concatenate(feats)
    mu, sigma = frechet.statistics(f)
    out = dict(mu=mu, sigma=sigma, dataset=c.data.name, split=FLAGS.split, image_size=c.data.image_size,
               num_images=n, weights=os.path.basename(c.eval.fid.inception_weights))
    if not FLAGS.no_features:
        out["features"] = f.astype(np.float32)
    tmp = FLAGS.output + ".tmp.npz"
    np.savez(tmp, **out)
    os.replace(tmp, FLAGS.output)
    print(f"Reference statistics of {n} {c.data.name} {FLAGS.split} images: {FLAGS.output}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
