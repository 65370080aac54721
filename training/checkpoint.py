"""Orbax checkpoints of the whole train state, and the guard against mixing runs in one workdir.

The workdir keeps `run_config.json`: the fields that define a run, i.e. every field its spec does not mark mutable
(config/schema.py: data, model, diffusion, seed, and the named sampler's and weighting's own fields).
A later run in the same workdir may change anything else (steps, learning rate, logging, mesh), but a run that
differs in a defining field stops with the differences, the part the user switched first, instead of restoring
checkpoints it cannot use.
A field added to the project after a workdir was written is absent from its run_config.json and taken to have had
its default, or the value the field names as `absent` where the default is new behaviour (model.positions: the
token transformer's learned positions before RoPE). A workdir that holds checkpoints but no run_config.json is
refused: the config that wrote them is unknown, and re-creating the file from today's config would vouch for it.

Faults lose nothing that was written: a checkpoint whose files cannot be read (truncated, missing, invalid: what a
write cut off by a full disk or a copy that stopped leaves) is named in one line with the reason, moved to
<workdir>/checkpoints_damaged/ and the run resumes from the newest readable one below it (restore_newest_readable).
A write that fails (a full disk) is one line naming the folder and its free space; orbax writes into a temporary
folder and renames it when complete, so the checkpoints before it stay intact and the next run resumes from them.
"""

import contextlib
import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from config import schema
from config.fields import flatten, get


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


def checkpoint_steps(workdir: str) -> list:
    """The steps of the checkpoints (complete or not) in <workdir>/checkpoints, ascending."""
    folder = epath.Path(workdir) / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted({int(p.name.split(".")[0]) for p in folder.iterdir() if p.name.split(".")[0].isdigit()})


def check_run_identity(config, workdir: str):
    """Write run_config.json on the first run; on later runs raise WorkdirMismatch if a defining field differs."""
    path = epath.Path(workdir) / "run_config.json"
    ident = run_identity(config)
    if path.exists():
        old = flatten(json.loads(path.read_text()))
        new = flatten(json.loads(json.dumps(ident)))
        fields = schema.active_fields(config)
        before = {k: _plain(f.default if f.absent is None else f.absent) for k, f in fields.items()}
        for k in set(new) - set(old):  # fields newer than the workdir: it ran with their default (or `absent`)
            if k in before:
                old[k] = before[k]
        diff = sorted(k for k in set(old) | set(new) if old.get(k, "<absent>") != new.get(k, "<absent>"))
        if diff:
            raise WorkdirMismatch(
                f"--workdir={workdir} holds checkpoints of a different run (workdir -> now: "
                f"{describe_changes(old, new, diff)}). Use a new --workdir, or the workdir's config."
            )
    elif steps := checkpoint_steps(workdir):
        raise WorkdirMismatch(
            f"--workdir={workdir} holds checkpoints {', '.join(map(str, steps))} but no run_config.json, the record "
            f"of the config that wrote them: put it back (a copy of the run's config), or use a new --workdir"
        )
    elif jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / (path.name + ".tmp")  # a kill mid-write must not leave a truncated file behind
        tmp.write_text(json.dumps(ident, indent=2, sort_keys=True))
        tmp.rename(path)


def describe_changes(old: dict, new: dict, diff: list, shown: int = 5) -> str:
    """The differing defining fields `diff` of two flat run identities in one line, what the user changed first: a
    section's part (config.sampler.name: 'adaptive' -> 'adaptive_noise') with the count of its section's fields that
    differ because of it (another part has other fields), then the other fields, at most `shown` in all."""
    value = lambda d, k: repr(d.get(k, "<absent>"))
    parts = [k for k in diff if k.count(".") == 1 and k.endswith(".name")]
    follows = {p: [k for k in diff if k != p and k.startswith(p[: -len("name")])] for p in parts}
    rest = [k for k in diff if k not in parts and not any(k in f for f in follows.values())]
    lines = []
    for p in parts:
        n = len(follows[p])
        more = f", and {n} field{'s' if n != 1 else ''} of config.{p[: -len('.name')]} that follow from it" if n else ""
        lines.append(f"config.{p}: {value(old, p)} -> {value(new, p)}{more}")
    lines += [f"config.{k}: {value(old, k)} -> {value(new, k)}" for k in rest]
    cut = f"; {len(lines) - shown} more" if len(lines) > shown else ""
    return "; ".join(lines[:shown]) + cut


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


class CheckpointWriteFailed(RuntimeError):
    pass


def free_space(path) -> str:
    """'X MiB free of Y MiB' on the file system of `path` (a local path, or its nearest existing parent)."""
    import shutil

    path = str(path)
    while "://" not in path and not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        u = shutil.disk_usage(path)
    except OSError:
        return "free space unknown"
    return f"{u.free / 2**20:.1f} MiB free of {u.total / 2**20:.1f} MiB"


def save(mngr, step: int, state):
    """Write checkpoint `step`; a failed write (a full disk, a file size limit) is CheckpointWriteFailed in one line
    naming the folder and its free space. Orbax writes into a temporary folder and renames it when complete, so
    the earlier checkpoints are untouched and the partial one is removed when the next run starts."""
    try:
        with _quiet_orbax():
            mngr.save(step, args=ocp.args.StandardSave(state), force=True)
            mngr.wait_until_finished()
    except Exception as e:  # the write failed: reported here, once
        where = mngr.directory
        done = [s for s in mngr.all_steps() if s != step]
        kept = f"checkpoints {', '.join(map(str, done))} are intact" if done else "no earlier checkpoint exists"
        raise CheckpointWriteFailed(
            f"checkpoint {step} could not be written to {where} ({_write_reason(e)}); {free_space(where)} there; "
            f"{kept}. Free some space and run the same command to resume."
        ) from None


@contextlib.contextmanager
def _quiet_orbax():
    """Orbax's own reports of a failed read or write silenced while the block runs: it logs each failure of its
    threads with a traceback; TensorStore's callbacks of operations still in flight after one failed land on
    orbax's closed event loop and print a traceback each; asyncio logs orbax's abandoned tasks with the same error
    when they are collected, whenever that is. The caller reports the failure in one line. After a good block
    logging and the hooks are as they were; after a failed one they stay quiet, since those reports go on
    arriving for a while."""
    import logging as py_logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.FATAL)
    hooks = _ignore_closed_loop_errors()
    aio = py_logging.getLogger("asyncio")
    aio_level = aio.level
    aio.setLevel(py_logging.CRITICAL)
    yield  # an exception from the block propagates from here, and what follows is skipped
    logging.set_verbosity(verbosity)
    aio.setLevel(aio_level)
    hooks()


def _from_orbax(e: BaseException) -> bool:
    """Whether an exception was raised in orbax's or TensorStore's code (a frame of its traceback is theirs)."""
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if f"{os.sep}orbax{os.sep}" in name or f"{os.sep}tensorstore{os.sep}" in name:
            return True
        tb = tb.tb_next
    return False


def _ignore_closed_loop_errors():
    """Route RuntimeError('Event loop is closed'), raised in threads and callbacks, and orbax's own errors that
    nobody retrieves (a coroutine or task of a failed read collected later: 'Exception ignored in: <coroutine ...>'
    with its traceback) nowhere, others to the hooks that were there; returns the function that puts those back."""
    import sys
    import threading

    closed = lambda e: isinstance(e, RuntimeError) and str(e) == "Event loop is closed"
    stray = lambda e: closed(e) or _from_orbax(e)  # never the main thread's own uncaught error
    hooks = sys.unraisablehook, sys.excepthook, threading.excepthook
    sys.unraisablehook = lambda u: None if stray(u.exc_value) else hooks[0](u)
    sys.excepthook = lambda t, v, tb: None if closed(v) else hooks[1](t, v, tb)
    threading.excepthook = lambda a: None if stray(a.exc_value) else hooks[2](a)

    def restore():
        sys.unraisablehook, sys.excepthook, threading.excepthook = hooks

    return restore


def _write_reason(e: BaseException) -> str:
    """The OS error and the file of a failed TensorStore write, else _reason."""
    import re

    text = "".join(str(x) for x in (e, e.__cause__, e.__context__) if x is not None)
    code = re.search(r"os_error_code='(\d+)'", text)
    if code is None:
        return _reason(e)
    file = re.search(r'Failed writing: "([^"]+)"', text)
    return os.strerror(int(code.group(1))) + (f" writing {file.group(1)}" if file else "")


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


def check_fits(meta, step: int, abstract_state, workdir: str):
    """Compare a checkpoint's stored shapes (its orbax item metadata) with this config's train
    state before restoring (a failed orbax restore raises deep inside its async machinery)."""
    meta = getattr(meta, "item_metadata", meta)
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


class CheckpointUnreadable(RuntimeError):
    """A checkpoint whose files cannot be read (truncated, missing, invalid): `step`, and `reason` in one line."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"checkpoint {step} is unreadable: {reason}")
        self.step, self.reason = step, reason


def _reason(e: BaseException) -> str:
    """One line of why an orbax / TensorStore read failed: the innermost error's first line (orbax wraps
    TensorStore's, which names the file)."""
    while (e.__cause__ or e.__context__) is not None and str(e.__cause__ or e.__context__):
        e = e.__cause__ or e.__context__
    line = (str(e).strip().splitlines() or [""])[0].split(" [tensorstore_spec=")[0]
    return f"{type(e).__name__}: {line[:300]}"


def restore(mngr, step: int, abstract_state, workdir: str):
    """Restore checkpoint `step` into `abstract_state` (ShapeDtypeStructs with shardings). WorkdirMismatch if it
    holds another train state; CheckpointUnreadable if its files cannot be read."""
    try:
        meta = mngr.item_metadata(step)
    except Exception as e:  # its metadata files are truncated or missing
        raise CheckpointUnreadable(step, _reason(e)) from None
    if getattr(meta, "item_metadata", meta) is None:  # orbax writes it with every checkpoint
        raise CheckpointUnreadable(step, "its default/_METADATA, the list of the arrays it holds, is missing")
    legacy = _legacy_target(meta, abstract_state)
    check_fits(meta, step, abstract_state if legacy is None else legacy, workdir)
    try:
        with _quiet_orbax():
            state = mngr.restore(step, args=ocp.args.StandardRestore(abstract_state if legacy is None else legacy))
    except Exception as e:  # it fits by its metadata: a failure to read it is damage
        raise CheckpointUnreadable(step, _reason(e)) from None
    if legacy is not None:
        state = state.replace(sampler_state=type(abstract_state.sampler_state).from_legacy(state.sampler_state))
    return state


def _legacy_target(meta, abstract_state):
    """The restore target for a checkpoint whose sampler state has an older layout, or None: a sampler state class
    with to_legacy / from_legacy / is_legacy (samplers/policy_state.py PolicyState, once a dict of short keys) is
    restored as that dict and converted."""
    sampler_state = getattr(abstract_state, "sampler_state", None)
    if not hasattr(sampler_state, "to_legacy"):
        return None
    if not type(sampler_state).is_legacy(_leaves(getattr(meta, "item_metadata", meta))):
        return None
    return abstract_state.replace(sampler_state=sampler_state.to_legacy())


DAMAGED = "checkpoints_damaged"


def set_aside(workdir: str, step: int) -> str:
    """Move checkpoint `step` out of orbax's folder into <workdir>/checkpoints_damaged/ (never deleted: orbax would
    otherwise count it among max_to_keep, or refuse to save that step again); returns where it went. Process 0
    moves, the others wait for it."""
    from jax.experimental import multihost_utils

    src = epath.Path(workdir) / "checkpoints" / str(step)
    dst = epath.Path(workdir) / DAMAGED / str(step)
    i = 1
    while dst.exists():  # the same step damaged again in a later attempt
        i += 1
        dst = epath.Path(workdir) / DAMAGED / f"{step}.{i}"
    if jax.process_index() == 0:
        dst.parent.mkdir(parents=True, exist_ok=True)
        src.rename(dst)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"set_aside_{step}")
    return str(dst)


def restore_newest_readable(mngr, abstract_state, workdir: str, say=print):
    """(state, step) of the newest checkpoint that reads, or (None, None) if none does. Each unreadable one newer
    than it is reported by `say` in one line and moved to <workdir>/checkpoints_damaged/ (set_aside), not deleted.
    All processes agree: a checkpoint unreadable on any process is unreadable."""
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            state, reason = restore(mngr, step, abstract_state, workdir), None
        except CheckpointUnreadable as e:
            state, reason = None, e.reason
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            bad = multihost_utils.process_allgather(np.int32(reason is not None))
            reason = reason or ("unreadable on another process" if np.any(bad) else None)
        if reason is None:
            return state, step
        where = set_aside(workdir, step)
        say(f"checkpoint {step} in {workdir}/checkpoints is damaged ({reason}); moved to {where}, not deleted")
        mngr.reload()
    return None, None


def abstract_with_shardings(abstract_state, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_state, shardings)
