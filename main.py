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
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first: with no other flag on a Cloud TPU "
                  "pod or under SLURM (auto-detected), else from the three flags below.")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, for --distributed off TPU/SLURM.")
flags.DEFINE_integer("num_processes", None, "Number of processes, for --distributed off TPU/SLURM.")
flags.DEFINE_integer("process_id", None, "This process's index, for --distributed off TPU/SLURM.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from training.platform import configure_cpu_devices

    configure_cpu_devices(FLAGS.config)  # before anything imports jax
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    if FLAGS.distributed:
        import jax

        if FLAGS.coordinator_address:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes; no effect on GPU/TPU
        jax.distributed.initialize(coordinator_address=FLAGS.coordinator_address, num_processes=FLAGS.num_processes,
                                   process_id=FLAGS.process_id)
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
