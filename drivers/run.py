"""What main.py does once its flags are parsed and JAX is set up: `run(config, workdir, mode)`, callable in-process
(a notebook, a test)."""

import sys


def run(config, workdir, mode: str = "train") -> int:
    """Train, eval or compile. Bad input is one line on stderr and exit status 2; divergence is status 1."""
    from config.validate import ConfigError
    from core.torch_file import NotAStateDict
    from data import CorruptRecord, DatasetNotFound
    from drivers.train import TrainingDiverged, train
    from evaluation.classifier import DamagedWeights
    from training.checkpoint import CheckpointUnreadable, CheckpointWriteFailed, WorkdirMismatch
    from training.lock import WorkdirLocked

    if mode in ("train", "eval") and not workdir:
        print("error: --workdir is required (where checkpoints, metrics and samples go)", file=sys.stderr)
        return 2
    try:
        if mode == "compile":
            from training import aot

            print(aot.compile_report(config), flush=True)
        elif mode == "eval":
            from drivers.evaluate import evaluate, summary

            print(summary(evaluate(config, workdir)), flush=True)
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
