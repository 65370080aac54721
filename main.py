"""Train a diffusion model with a chosen timestep sampler.

    python main.py --config=configs/default.py --workdir=/tmp/digits [--config.FIELD=VALUE ...]
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config (a configs/*.py file).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and samples go.")
flags.DEFINE_enum("mode", "train", ["train"], "What to do.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from training.platform import configure_cpu_devices

    configure_cpu_devices(FLAGS.config)  # before anything imports jax
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    from training.checkpoint import WorkdirMismatch
    from training.train import TrainingDiverged, train
    from training.validate import ConfigError
    from data import DatasetNotFound

    if not FLAGS.workdir:
        print("error: --workdir is required (where checkpoints, metrics and samples go)", file=sys.stderr)
        return 2
    try:
        if FLAGS.mode == "train":
            train(FLAGS.config, FLAGS.workdir)
    except (ConfigError, WorkdirMismatch, DatasetNotFound) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"error: training diverged at {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
