"""Orbax checkpoints of the whole train state, and the guard against mixing runs in one workdir.

The workdir keeps `run_config.json`: the fields that define a run (data, model, diffusion, sampler, weighting, seed).
A later run in the same workdir may change anything else (steps, learning rate, logging, mesh), but a run that
differs in a defining field stops with the list of differences instead of restoring checkpoints it cannot use.
"""
import json
import os

import jax
import orbax.checkpoint as ocp
from etils import epath

# Sections a resumed run may change without starting a different run.
MUTABLE = ("train", "sample", "mesh", "diagnostics", "eval")
MUTABLE_FIELDS = ("data.data_dir", "sampler.policy_lr", "sampler.entropy_coef", "sampler.update_every")


class WorkdirMismatch(RuntimeError):
    pass


def run_identity(config) -> dict:
    d = json.loads(config.to_json_best_effort())
    for k in MUTABLE:
        d.pop(k, None)
    for f in MUTABLE_FIELDS:
        sect, key = f.split(".")
        d.get(sect, {}).pop(key, None)
    return d


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def check_run_identity(config, workdir: str):
    """Write run_config.json on the first run; on later runs raise WorkdirMismatch if a defining field differs."""
    path = epath.Path(workdir) / "run_config.json"
    ident = run_identity(config)
    if path.exists():
        old = _flatten(json.loads(path.read_text()))
        new = _flatten(json.loads(json.dumps(ident)))
        diff = sorted(k for k in set(old) | set(new) if old.get(k, "<absent>") != new.get(k, "<absent>"))
        if diff:
            shown = "; ".join(f"config.{k}: {old.get(k, '<absent>')!r} in the workdir, {new.get(k, '<absent>')!r} now"
                              for k in diff[:5])
            raise WorkdirMismatch(f"--workdir={workdir} holds checkpoints of a different run ({shown}). "
                                  f"Use a new --workdir, or the workdir's config.")
    elif jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ident, indent=2, sort_keys=True))


def make_manager(config, workdir: str) -> ocp.CheckpointManager:
    opts = ocp.CheckpointManagerOptions(max_to_keep=config.train.keep_checkpoints, create=True,
                                        enable_async_checkpointing=False, cleanup_tmp_directories=True)
    return ocp.CheckpointManager(epath.Path(workdir) / "checkpoints", options=opts)


def save(mngr, step: int, state):
    mngr.save(step, args=ocp.args.StandardSave(state), force=True)
    mngr.wait_until_finished()


def restore(mngr, step: int, abstract_state, workdir: str):
    """Restore into `abstract_state` (ShapeDtypeStructs with shardings); a shape mismatch is a clear error."""
    try:
        return mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))
    except (ValueError, KeyError, TypeError) as e:
        raise WorkdirMismatch(f"--workdir={workdir}: checkpoint {step} does not fit this config's train state "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:200]}). Use a new --workdir.") from None


def abstract_with_shardings(abstract_state, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_state, shardings)
