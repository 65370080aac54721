"""One writer per workdir: a training run holds <workdir>/.lock while it runs (`hold`).

Two runs in one workdir (a scheduler's retry, a second terminal, a pod restored while its old process still runs)
would interleave their metrics.jsonl records and overwrite each other's checkpoints, and --mode=eval would then
evaluate a checkpoint of unknown provenance. So a run takes the lock before it writes anything (after the config
checks and the workdir's write check, before the model is built and the step compiled), and a second run is refused
in one line naming the holder (host, process id, start time) and what to do, having changed nothing.

The lock file holds its holder as JSON: host name, boot id and pid namespace (which machine, which boot, which
process table), process id and that process's start time (/proc/PID/stat: a reused pid has another), when and by
which command it was taken, and a random token. It is created whole and atomically: written to a file of its own,
then hard-linked to .lock (os.link fails if .lock exists: no other process ever sees it half written); where the
file system has no hard links, O_CREAT | O_EXCL, then written.

A lock whose run is gone does not block the next run forever. It is stale, and the next run takes it over with a
note saying which rule applied, when
- its holder ran on this machine (same host name, boot id and pid namespace) and that process is gone (exited,
  killed with kill -9, a zombie, or its pid now another process's): at once;
- its holder ran elsewhere (another host; this host before a reboot; another container) and its heartbeat stopped:
  the holder touches the file every HEARTBEAT_S seconds from a thread of its own, and a lock untouched for LEASE_S
  (10 minutes) is taken for a lost host. The file's modification time is the file server's clock, compared with
  this host's: the hosts' clocks must agree to well within the lease.
Taking a stale lock over happens under a breaker file (.lock.break, O_CREAT | O_EXCL, held for milliseconds; one
older than BREAKER_STALE_S is a taker-over that died there) and only if .lock still holds the stale record, so two
runs that find the same stale lock do not both take it.

The lock is released (removed, if it still holds this run's token) when the run ends: normally, by an error, and on
the SIGTERM / SIGINT path (training/preemption.py stops the loop, which returns). A run killed outright leaves it,
stale as above. With several JAX processes, process 0 takes the lock for the job and tells the others through the
coordination service's key-value store whether to go on; they never touch the lock file. A remote workdir
(gs://...) is not locked: object stores have no atomic exclusive create here.

--mode=eval does not take the lock (it only reads checkpoints and writes eval/): it may run beside training, and
says which checkpoint step it evaluated and, through `holder`, that a run is writing the workdir.
"""

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid

LOCK = ".lock"
BREAKER = ".lock.break"
HEARTBEAT_S = 60.0
LEASE_S = 600.0
BREAKER_STALE_S = 60.0


class WorkdirLocked(RuntimeError):
    """Another run holds the workdir: one line naming it and what to do."""


def _read(path: str, default=None) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def _start_time(pid: int):
    """(state, start time in clock ticks since boot) of process `pid` from /proc, (None, None) if there is no such
    process, ("?", None) where /proc is not there."""
    if not os.path.isdir("/proc/self"):
        return "?", None
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None, None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces and parentheses
    return fields[0], int(fields[19])


def this_machine() -> dict:
    """What identifies this machine, boot and process table."""
    return dict(
        host=socket.gethostname(),
        boot_id=_read("/proc/sys/kernel/random/boot_id", ""),
        pid_ns=os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self/ns/pid") else "",
    )


def this_process() -> dict:
    """The record a lock file holds: this machine, this process, the time, the command, a token."""
    now = time.time()
    return dict(
        this_machine(),
        pid=os.getpid(),
        pid_start=_start_time(os.getpid())[1],
        started=time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now)),
        started_unix=now,
        command=" ".join(sys.argv),
        token=uuid.uuid4().hex,
    )


def _alive(pid, pid_start) -> bool:
    """Whether process `pid` of this machine is the one that wrote the lock and still runs."""
    state, start = _start_time(pid)
    if state == "?":  # no /proc: signal 0 tests that the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if state is None or state in "ZX":  # gone, or a zombie its parent has not reaped
        return False
    return pid_start is None or start == pid_start


def read_holder(workdir: str):
    """(record, seconds since its last heartbeat) of the workdir's lock, or (None, None) if there is none. A file
    that is not a record (a lock being written where there are no hard links, or damaged) is {}."""
    path = os.path.join(workdir, LOCK)
    try:
        mtime = os.stat(path).st_mtime
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None, None
    try:
        record = json.loads(text)
    except ValueError:
        record = {}
    return (record if isinstance(record, dict) else {}), max(time.time() - mtime, 0.0)


def stale_reason(record: dict, age: float, lease_s: float = LEASE_S):
    """Why a lock is stale (one phrase), or None while its holder may be running."""
    here = this_machine()
    same = all(record.get(k) == here[k] for k in here)
    if same and isinstance(record.get("pid"), int):
        if _alive(record["pid"], record.get("pid_start")):
            return None
        return f"its process {record['pid']} on this host ({here['host']}) is gone"
    if age > lease_s:
        return (
            f"its holder is on another host or an earlier boot ({record.get('host', 'unknown')}) and sent no "
            f"heartbeat for {age / 60:.0f} min (such a lock is stale after {lease_s / 60:.0f} min without one)"
        )
    return None


def describe(record: dict, age: float) -> str:
    """'process P on host H, started T (last heartbeat N s ago)'."""
    if not record:
        return f"an unreadable lock record (last touched {age:.0f} s ago)"
    return (
        f"process {record.get('pid')} on host {record.get('host')}, started {record.get('started')} (last "
        f"heartbeat {age:.0f} s ago)"
    )


@contextlib.contextmanager
def _breaker(workdir: str):
    """The right to take a stale lock over (O_CREAT | O_EXCL); WorkdirLocked if another run is taking it over."""
    path = os.path.join(workdir, BREAKER)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                old = time.time() - os.stat(path).st_mtime > BREAKER_STALE_S
            except FileNotFoundError:
                continue  # released meanwhile
            if not old:
                raise WorkdirLocked(
                    f"--workdir={workdir}: another run is taking over its stale lock right now ({path}); run again "
                    "in a minute"
                ) from None
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)  # a taker-over that died within its few milliseconds
    else:
        raise WorkdirLocked(f"--workdir={workdir}: {path} could not be created; run again in a minute")
    try:
        os.close(fd)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _create(path: str, text: str) -> bool:
    """Create `path` holding `text`, atomically; False if it exists."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # NFS may make the link and lose the reply; other file systems have no hard links
        if os.stat(tmp).st_nlink == 2:
            return True
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True
    finally:
        os.remove(tmp)


class Lock:
    """A held workdir lock: its heartbeat thread runs until release()."""

    def __init__(self, workdir: str, record: dict, heartbeat_s: float, say):
        self.workdir, self.record, self.say = workdir, record, say
        self.path = os.path.join(workdir, LOCK)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), name="workdir-lock", daemon=True)
        self._thread.start()

    def ours(self) -> bool:
        record, _ = read_holder(self.workdir)
        return bool(record) and record.get("token") == self.record["token"]

    def _beat(self, every: float):
        while not self._stop.wait(every):
            if not self.ours():  # taken over (this process was taken for gone): touch nothing of the other run's
                self.say(
                    f"warning: the lock of --workdir={self.workdir} was taken over by another run; this run's "
                    "checkpoints and metrics may mix with its"
                )
                return
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.path)

    def release(self):
        self._stop.set()
        self._thread.join()
        if self.ours():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)


def _say(line: str):
    print(line, file=sys.stderr, flush=True)


def acquire(workdir: str, heartbeat_s: float = HEARTBEAT_S, lease_s: float = LEASE_S, say=_say) -> Lock:
    """Take the workdir's lock (module docstring) or raise WorkdirLocked naming its holder; a stale lock is taken
    over with a note saying why it was stale."""
    path = os.path.join(workdir, LOCK)
    record = this_process()
    text = json.dumps(record, indent=2)
    for _ in range(5):  # a lock released or taken over between the steps below: look again
        if _create(path, text):
            return Lock(workdir, record, heartbeat_s, say)
        holder, age = read_holder(workdir)
        if holder is None:
            continue
        why = stale_reason(holder, age, lease_s)
        if why is None:
            raise WorkdirLocked(
                f"--workdir={workdir} is in use by another run: {describe(holder, age)}; its lock is {path}. Wait for "
                "it to end or stop it; two runs in one workdir would mix their metrics and checkpoints. A lock whose "
                f"run is gone is taken over by the next run: at once on the same host, after {lease_s / 60:.0f} min "
                "without a heartbeat from another"
            )
        with _breaker(workdir):
            again, _ = read_holder(workdir)
            if again is None or again.get("token") != holder.get("token"):
                continue  # released or taken over meanwhile
            os.remove(path)
        say(f"note: took over the lock of --workdir={workdir} from {describe(holder, age)}: {why}")
    raise WorkdirLocked(f"--workdir={workdir}: its lock {path} changed hands five times while this run looked")


_calls = [0]  # hold() calls in this process: the same sequence on every process of a job, for the store's keys


@contextlib.contextmanager
def hold(workdir: str, heartbeat_s: float = HEARTBEAT_S):
    """Hold the workdir's lock for the block: process 0 of the job takes it (acquire) and the others learn from the
    coordination service whether to go on; WorkdirLocked on every process if it is held. A remote workdir is not
    locked (module docstring)."""
    if "://" in workdir:
        yield None
        return
    import jax

    n, _calls[0] = _calls[0], _calls[0] + 1
    lock, refusal, failure = None, "", None
    if jax.process_index() == 0:
        try:
            lock = acquire(workdir, heartbeat_s)
        except Exception as e:  # the others must hear of any failure, or they would wait for the answer
            failure = e
            refusal = str(e) if isinstance(e, WorkdirLocked) else f"process 0 could not lock --workdir={workdir}"
    if jax.process_count() > 1:
        from jax._src import distributed  # the coordination service's client: no device, nothing compiled

        key = f"workdir_lock/{n}"
        if jax.process_index() == 0:
            distributed.global_state.client.key_value_set(key, refusal or "ok")
        else:
            answer = distributed.global_state.client.blocking_key_value_get(key, 10 * 60_000)
            refusal = "" if answer == "ok" else answer
    if failure is not None:
        raise failure
    if refusal:
        raise WorkdirLocked(refusal)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def holder(workdir: str):
    """'process P on host H, started T (...)' of a run that holds the workdir now, or None."""
    if "://" in workdir:
        return None
    record, age = read_holder(workdir)
    if record is None or stale_reason(record, age) is not None:
        return None
    return describe(record, age)
