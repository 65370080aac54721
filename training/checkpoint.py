"""Orbax checkpoints of the whole train state, and the guard against mixing runs in one workdir.

The workdir keeps `run_config.json`: the fields that define a run, i.e. every field its spec does not mark mutable
(training/schema.py: data, model, diffusion, seed, and the named sampler's and weighting's own fields).
A later run in the same workdir may change anything else (steps, learning rate, logging, mesh), but a run that
differs in a defining field stops with the list of differences instead of restoring checkpoints it cannot use.
A field added to the project after a workdir was written is absent from its run_config.json and taken to have had
its default.
"""

import json

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from core.fields import flatten, get
from training import schema


class WorkdirMismatch(RuntimeError):
    pass


def _plain(value):
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def run_identity(config) -> dict:
    """{section: {field: value}} of the fields that define the run (JSON types: tuples become lists)."""
    out = {}
    for path, field in schema.active_fields(config).items():
        if field.mutable:
            continue
        *parents, last = path.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = _plain(get(config, path))
    return out


def check_run_identity(config, workdir: str):
    """Write run_config.json on the first run; on later runs raise WorkdirMismatch if a defining field differs."""
    path = epath.Path(workdir) / "run_config.json"
    ident = run_identity(config)
    if path.exists():
        old = flatten(json.loads(path.read_text()))
        new = flatten(json.loads(json.dumps(ident)))
        defaults = {k: _plain(f.default) for k, f in schema.active_fields(config).items()}
        for k in set(new) - set(old):  # fields newer than the workdir: it was written with their defaults
            if new[k] == defaults.get(k, "<no default>"):
                old[k] = new[k]
        diff = sorted(k for k in set(old) | set(new) if old.get(k, "<absent>") != new.get(k, "<absent>"))
        if diff:
            shown = "; ".join(
                f"config.{k}: {old.get(k, '<absent>')!r} in the workdir, {new.get(k, '<absent>')!r} now"
                for k in diff[:5]
            )
            raise WorkdirMismatch(
                f"--workdir={workdir} holds checkpoints of a different run ({shown}). "
                f"Use a new --workdir, or the workdir's config."
            )
    elif jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / (path.name + ".tmp")  # a kill mid-write must not leave a truncated file behind
        tmp.write_text(json.dumps(ident, indent=2, sort_keys=True))
        tmp.rename(path)


# Orbax's replica-parallel saving slices every replicated array into one piece per replica, each slice an eagerly
# dispatched (and compiled) op: 7.5 s per save of this state on 8 CPU devices. Arrays smaller than this per replica
# are written whole by one replica (0.x s); large ones still spread their writes over the replicas.
MIN_REPLICA_SLICE_BYTES = 16 << 20
_handler_registered = False


def use_large_replica_slices():
    """Register orbax's array handler with MIN_REPLICA_SLICE_BYTES (a process-wide orbax setting): done once, by
    make_manager, where this project writes checkpoints, not at import."""
    global _handler_registered
    if _handler_registered:
        return
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # orbax warns that the default handler is being overridden: it is, on purpose
    try:
        ocp.type_handlers.register_type_handler(
            jax.Array,
            ocp.type_handlers.ArrayHandler(min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES),
            override=True,
        )
    finally:
        logging.set_verbosity(verbosity)
    _handler_registered = True


def make_manager(config, workdir: str) -> ocp.CheckpointManager:
    use_large_replica_slices()
    opts = ocp.CheckpointManagerOptions(
        max_to_keep=config.train.keep_checkpoints,
        create=True,
        enable_async_checkpointing=False,
        cleanup_tmp_directories=True,
    )
    return ocp.CheckpointManager(
        epath.Path(workdir) / "checkpoints", options=opts, item_handlers=ocp.StandardCheckpointHandler()
    )


def save(mngr, step: int, state):
    mngr.save(step, args=ocp.args.StandardSave(state), force=True)
    mngr.wait_until_finished()


def _leaves(tree):
    """{dotted path: (shape, dtype)} of a pytree of arrays / ShapeDtypeStructs / orbax ArrayMetadata."""

    def name(k):
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                return str(getattr(k, attr))
        return str(k)

    return {
        ".".join(name(k) for k in path): (tuple(x.shape), str(x.dtype))
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
    }


def check_fits(mngr, step: int, abstract_state, workdir: str):
    """Compare the checkpoint's stored shapes with this config's train state before restoring (a failed orbax
    restore raises deep inside its async machinery)."""
    meta = mngr.item_metadata(step)
    meta = getattr(meta, "item_metadata", meta)
    if meta is None:
        return
    stored, wanted = _leaves(meta), _leaves(abstract_state)
    for path in sorted(set(stored) | set(wanted)):
        have, need = stored.get(path), wanted.get(path)
        if have != need:
            what = (
                f"has no {path}"
                if have is None
                else f"holds {path} that this config's train state does not have"
                if need is None
                else f"holds {path} with shape {have[0]} {have[1]}, this config needs {need[0]} {need[1]}"
            )
            raise WorkdirMismatch(
                f"--workdir={workdir}: checkpoint {step} does not fit this config's train state "
                f"(it {what}). Use a new --workdir, or the config that wrote it."
            )


def restore(mngr, step: int, abstract_state, workdir: str):
    """Restore into `abstract_state` (ShapeDtypeStructs with shardings); a checkpoint of another shape is a clear
    error."""
    check_fits(mngr, step, abstract_state, workdir)
    try:
        return mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))
    except (ValueError, KeyError, TypeError) as e:
        raise WorkdirMismatch(
            f"--workdir={workdir}: checkpoint {step} does not fit this config's train state "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200]}). Use a new --workdir."
        ) from None


def abstract_with_shardings(abstract_state, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_state, shardings)
