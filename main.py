"""Train a diffusion model with a chosen timestep sampler.

python main.py --config=configs/default.py --workdir=/tmp/digits [--config.FIELD=VALUE ...]
python main.py --mode=show --config=configs/default.py        # every field: its value, what it allows
python main.py --mode=compile --config=configs/cifar10.py     # memory and FLOPs of the step, no training

The config's fields, overrides and what may change on resume: docs/config.md.
"""

import os
import sys

from absl import flags, logging
from ml_collections import config_flags

from core import cli

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
    from core.compilation_cache import configure_compilation_cache
    from data.latents import planned_latents
    from training.platform import configure_cpu_devices

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
    configure_cpu_devices(FLAGS.config)  # before JAX starts its backends
    configure_compilation_cache(FLAGS.config)
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


def run(config, workdir, mode: str = "train") -> int:
    """What main.py does once flags are parsed and JAX is set up, callable in-process (a notebook, a test): train,
    eval or compile. Bad input is one line on stderr and exit status 2; divergence is status 1."""
    from config.validate import ConfigError
    from core.torch_file import NotAStateDict
    from data import CorruptRecord, DatasetNotFound
    from evaluation.classifier import DamagedWeights
    from training.checkpoint import CheckpointUnreadable, CheckpointWriteFailed, WorkdirMismatch
    from training.lock import WorkdirLocked
    from training.train import TrainingDiverged, train

    if mode in ("train", "eval") and not workdir:
        print("error: --workdir is required (where checkpoints, metrics and samples go)", file=sys.stderr)
        return 2
    try:
        if mode == "compile":
            from training import aot

            print(aot.compile_report(config), flush=True)
        elif mode == "eval":
            from evaluation.evaluate import evaluate

            r = evaluate(config, workdir)
            nll = r["nll_bpd"]
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
            print(
                f"checkpoint {r['checkpoint_step']}: test NLL {rel} {nll['value']:.4f} {unit} "
                f"(+- {nll['stderr'] or 0:.4f}, {proto['images']} {items}, {how}, {proto['seconds']:.1f} s)"
                + _fid_line(r.get("fid", {}))
                + (f"\nResults: {r['path']}" if "path" in r else ""),
                flush=True,
            )
        else:
            train(config, workdir)
    except (ConfigError, WorkdirMismatch, WorkdirLocked, DatasetNotFound, NotAStateDict) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"error: training diverged at {e}", file=sys.stderr)
        return 1
    except (CheckpointUnreadable, CheckpointWriteFailed, CorruptRecord, DamagedWeights) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


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


def check_config_file(argv):
    """Build the --config file's config once (its argument included, e.g. configs/cifar10.py:linear,p2) and return
    it: a bad argument would otherwise surface as a traceback inside flag parsing."""
    import importlib.util

    from config.validate import ConfigError

    value = "configs/default.py"
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            value = a.split("=", 1)[1]
        elif a == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
    path, _, arg = value.partition(":")
    spec = importlib.util.spec_from_file_location("_config_check", path)
    if spec is None or not os.path.exists(path):
        raise ConfigError(f"--config={value}: no config file {path!r}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        return module.get_config(arg) if arg else module.get_config()
    except Exception as e:  # the file's own error, at its own line: one line, not a traceback through absl
        raise ConfigError(f"--config={value}: {where_in(e, path)}") from None


def where_in(e: BaseException, path: str) -> str:
    """'FILE:LINE: Type: message' of an error raised by (or, a syntax error, in) the file `path`: its innermost
    frame in that file (the line a user edits), else the innermost frame."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}: SyntaxError: {e.msg}"
    frames, tb = [], e.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    mine = [f for f in frames if os.path.abspath(f[0]) == os.path.abspath(path)]
    file, line = (mine or frames)[-1]
    what = " ".join(str(e).split()) or "(no message)"
    file = os.path.relpath(file) if file.startswith(os.getcwd() + os.sep) else file
    return f"{file}:{line}: {type(e).__name__}: {what}"


def define_config_flag(flag_values, argv):
    """Define --config (ml_collections' config file flag) in `flag_values`, its overrides those of `argv` (without
    the program's name)."""
    config_flags.DEFINE_config_file(
        "config",
        "configs/default.py",
        "Experiment config (a configs/*.py file[:argument]); any field is overridden with --config.FIELD=VALUE. "
        "--mode=show prints every field with its value and what it allows; docs/config.md explains them.",
        flag_values=flag_values,
        lock_config=True,
        sys_argv=["main.py", *argv],
    )


def parse_overrides(argv, config):
    """The --config file's config with argv's overrides, parsed by ml_collections as main's flags will be, but into
    flags of its own: a value it cannot parse for its field is a ConfigError in one line naming the flag, the value
    and the field's type (absl would print "FATAL Flags parsing error" and a second line, and exit 1). `config`: the
    --config file's, for the types."""
    import re

    from config.fields import flatten
    from config.overrides import a_type
    from config.validate import ConfigError

    fv = flags.FlagValues()
    try:
        define_config_flag(fv, argv)
        fv(["main.py", *argv], known_only=True)  # --workdir, --mode, --help: main's flags, parsed there
    except (flags.Error, ValueError) as e:
        why = " ".join(str(e).split())
        m = re.match(r"flag --config\.([\w.]+)=(.*?): ", why)
        if m is None:
            raise ConfigError(why) from None
        path = m.group(1)
        given = [a.split("=", 1)[1] for a in argv if a.startswith(f"--config.{path}=")]
        raw = given[-1] if given else m.group(2)  # the message's own copy ends at the first ": " in the value
        reason = why.split(f"={raw}: ", 1)[1] if f"={raw}: " in why else why[m.end() :]
        current = flatten(config).get(path)
        kind = "a section" if current is None else a_type(current)
        raise ConfigError(f"--config.{path}={raw!r} is not allowed: must be {kind} ({reason})") from None
    return fv.config


def check_command_line(argv):
    """(argv, part switches, config) of a command line: a bad config argument, an override naming no field or a
    value its field's parser refuses would fail deep inside flag parsing with a traceback or two lines; each is a
    ConfigError in one line here. argv comes back with fields' earlier names rewritten (a note each) and the part
    switches taken out (main applies them to the parsed config)."""
    from config.overrides import check_overrides, part_switches, rename_overrides

    config = check_config_file(argv)
    argv = rename_overrides(argv, config)  # fields' earlier names (sample.ddim_steps), a note
    switches = part_switches(argv, config)
    deferred = {f"--config.{path}={value}" for path, value in switches}
    argv = [a for a in argv if a not in deferred]
    check_overrides(argv, config)
    return argv, switches, parse_overrides(argv, config)


def check_overrides_then_run():
    """Refuse a bad command line in one line (check_command_line), then run main."""
    from config.validate import ConfigError

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
    # --config and its overrides are checked (check_command_line); parsed twice, ml_collections defines the
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
