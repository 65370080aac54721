"""Orbax checkpoints of the whole train state, and the guard against mixing runs in one workdir.

The workdir keeps `run_config.json`: the fields that define a run (data, model, diffusion, seed, and the named
sampler's and weighting's own fields).
A later run in the same workdir may change anything else (steps, learning rate, logging, mesh), but a run that
differs in a defining field stops with the list of differences instead of restoring checkpoints it cannot use.
"""
import json

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

# Sections a resumed run may change without starting a different run.
MUTABLE = ("train", "sample", "mesh", "diagnostics", "eval")
MUTABLE_FIELDS = ("data.data_dir", "sampler.adaptive.policy_lr", "sampler.adaptive.entropy_coef",
                  "sampler.adaptive.update_every", "sampler.grad_variance.update_every")
# Sections with one sub-config per registered name: only the named one's fields define the run.
BY_NAME = ("sampler", "weighting")


class WorkdirMismatch(RuntimeError):
    pass


def run_identity(config) -> dict:
    d = json.loads(config.to_json_best_effort())
    for k in MUTABLE:
        d.pop(k, None)
    for sect in BY_NAME:
        sub = d.get(sect, {})
        for k in [k for k, v in sub.items() if isinstance(v, dict) and k != sub.get("name")]:
            del sub[k]
    for f in MUTABLE_FIELDS:
        *path, key = f.split(".")
        node = d
        for p in path:
            node = node.get(p, {})
        node.pop(key, None)
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
        tmp = path.parent / (path.name + ".tmp")  # a kill mid-write must not leave a truncated file behind
        tmp.write_text(json.dumps(ident, indent=2, sort_keys=True))
        tmp.rename(path)


# Orbax's replica-parallel saving slices every replicated array into one piece per replica, each slice an eagerly
# dispatched (and compiled) op: 7.5 s per save of this state on 8 CPU devices. Arrays smaller than this per replica
# are written whole by one replica (0.x s); large ones still spread their writes over the replicas.
MIN_REPLICA_SLICE_BYTES = 16 << 20
_verbosity = logging.get_verbosity()
logging.set_verbosity(logging.ERROR)  # orbax warns that the default handler is being overridden: it is, on purpose
ocp.type_handlers.register_type_handler(
    jax.Array, ocp.type_handlers.ArrayHandler(min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES),
    override=True)
logging.set_verbosity(_verbosity)


def make_manager(config, workdir: str) -> ocp.CheckpointManager:
    opts = ocp.CheckpointManagerOptions(max_to_keep=config.train.keep_checkpoints, create=True,
                                        enable_async_checkpointing=False, cleanup_tmp_directories=True)
    return ocp.CheckpointManager(epath.Path(workdir) / "checkpoints", options=opts,
                                 item_handlers=ocp.StandardCheckpointHandler())


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
    return {".".join(name(k) for k in path): (tuple(x.shape), str(x.dtype))
            for path, x in jax.tree_util.tree_leaves_with_path(tree)}


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
            what = (f"has no {path}" if have is None else
                    f"holds {path} that this config's train state does not have" if need is None else
                    f"holds {path} with shape {have[0]} {have[1]}, this config needs {need[0]} {need[1]}")
            raise WorkdirMismatch(f"--workdir={workdir}: checkpoint {step} does not fit this config's train state "
                                  f"(it {what}). Use a new --workdir, or the config that wrote it.")


def restore(mngr, step: int, abstract_state, workdir: str):
    """Restore into `abstract_state` (ShapeDtypeStructs with shardings); a checkpoint of another shape is a clear
    error."""
    check_fits(mngr, step, abstract_state, workdir)
    try:
        return mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))
    except (ValueError, KeyError, TypeError) as e:
        raise WorkdirMismatch(f"--workdir={workdir}: checkpoint {step} does not fit this config's train state "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:200]}). Use a new --workdir.") from None


def abstract_with_shardings(abstract_state, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_state, shardings)
