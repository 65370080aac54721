"""Train a diffusion model with a chosen timestep sampler.

python main.py --config=configs/default.py --workdir=/tmp/digits [--config.FIELD=VALUE ...]
python main.py --mode=show --config=configs/default.py        # every field: its value, what it allows
python main.py --mode=compile --config=configs/cifar10.py     # memory and FLOPs of the step, no training

Flags here; the command line checked in config/command_line.py; then drivers/run.py runs the mode. The config's
fields, overrides and what may change on resume: docs/config.md.
"""

import sys

from absl import flags, logging

from core import cli
from drivers.run import run

# --config is defined by check_overrides_then_run (define_config_flag), after the command line is checked:
# ml_collections reads the overrides when the flag is defined, and fails with a traceback on some (--config.=3)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and samples go.")
flags.DEFINE_enum(
    "mode",
    "train",
    ["train", "eval", "compile", "show"],
    "train: train or resume in --workdir. eval: evaluate the latest checkpoint in --workdir (test "
    "bits/dim, samples) into --workdir/eval/. compile: compile the train step for the configured mesh "
    "and print its memory and FLOP estimates, without training (no --workdir needed). show: print the "
    "checked config, every field with its value, what it allows and whether it defines the run (no --workdir "
    "needed; docs/config.md).",
)
flags.DEFINE_bool(
    "distributed",
    False,
    "Call jax.distributed.initialize() first: with no other flag on a Cloud TPU "
    "pod or under SLURM (auto-detected), else from the three flags below.",
)
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, for --distributed off TPU/SLURM.")
flags.DEFINE_integer("num_processes", None, "Number of processes, for --distributed off TPU/SLURM.")
flags.DEFINE_integer("process_id", None, "This process's index, for --distributed off TPU/SLURM.")
FLAGS = flags.FLAGS
# overrides that switch a flat section (--config.model.name=dit) and set that section's fields: applied by main()
# to the parsed config, since ml_collections would look for the new part's fields in the old part's section
SWITCHES = []


def main(argv):
    del argv
    from contextlib import nullcontext

    from config.overrides import apply_switches
    from config.validate import ConfigError, check_fields, check_values
    from data.latents import planned_latents
    from training.platform import prepare_host

    try:  # names, types and ranges first: a bad value must not be used to set up the devices
        apply_switches(FLAGS.config, SWITCHES)
        check_fields(FLAGS.config)
        # a compile reads no data: a latent config is checked against the latents it describes (compile_report)
        with planned_latents(FLAGS.config) if FLAGS.mode == "compile" else nullcontext((FLAGS.config, "")) as (c, _):
            check_values(c)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if FLAGS.mode == "show":
        from config.schema import describe

        print(describe(FLAGS.config), flush=True)
        return 0
    prepare_host(FLAGS.config)  # CPU devices, compilation cache, malloc: before JAX starts its backends
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    if FLAGS.distributed:
        import jax

        if FLAGS.coordinator_address:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes; no effect on GPU/TPU
        jax.distributed.initialize(
            coordinator_address=FLAGS.coordinator_address,
            num_processes=FLAGS.num_processes,
            process_id=FLAGS.process_id,
        )
    return run(FLAGS.config, FLAGS.workdir, FLAGS.mode)


def check_overrides_then_run():
    """Refuse a bad command line in one line (config/command_line.py), then run main."""
    from config.command_line import check_command_line, define_config_flag
    from config.fields import ConfigError

    try:
        sys.argv[1:], SWITCHES[:], _ = check_command_line(sys.argv[1:])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    define_config_flag(FLAGS, sys.argv[1:])
    problem = check_main_flags(sys.argv)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    cli.run(lambda argv: sys.exit(main(argv)))


def check_main_flags(argv) -> str:
    """'' or one line on a flag of main.py that absl refuses (a mistyped --work_dir, --mode=trian), naming the
    nearest flag: absl would print "FATAL Flags parsing error" and a second line, and exit 1. --help is absl's."""
    if any(a.split("=")[0] in cli.HELP_FLAGS for a in argv[1:]):
        return ""
    # --config and its overrides are checked (config/command_line.py); parsed twice, ml_collections defines the
    # overrides' flags twice
    config_args = {i for i, a in enumerate(argv) if a.startswith(("--config.", "--config="))}
    config_args |= {j for i, a in enumerate(argv) if a == "--config" for j in (i, i + 1)}
    try:
        FLAGS([a for i, a in enumerate(argv) if i not in config_args])
    except flags.UnrecognizedFlagError as e:
        import difflib

        near = difflib.get_close_matches(e.flagname, list(FLAGS), 1, cutoff=0.6)
        hint = f"did you mean --{near[0]}?" if near else "see python main.py --help"
        return f"--{e.flagname} is not a flag of main.py; {hint}"
    except flags.Error as e:
        return " ".join(str(e).split())
    finally:
        FLAGS.unparse_flags()  # absl's app.run parses them again
    return ""


if __name__ == "__main__":
    check_overrides_then_run()
