"""One writer per workdir (training/lock.py), with real processes: a second run is refused in one line naming the
holder and changes nothing; a lock left by kill -9 (a zombie too) or a reused pid is stale at once on the same
host; another host's lock is held while its heartbeat runs and stale after the lease. No clock is waited on: the
lease is tested by a lock file's modification time, as a lost host leaves it."""

import json
import os
import socket
import time

import pytest

from conftest import files, lock_holder, run_main, tiny_flags
from training.lock import LOCK, WorkdirLocked, acquire, read_holder


def release(holder):
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0


def test_a_second_run_is_refused_naming_the_holder_and_the_lock_goes_with_the_holder(tmp_path):
    wd = str(tmp_path)
    holder = lock_holder(wd)
    try:
        with pytest.raises(WorkdirLocked) as e:
            acquire(wd)
        said = str(e.value)
        assert "\n" not in said and said.startswith(f"--workdir={wd} is in use by another run: process {holder.pid} ")
        assert f"on host {socket.gethostname()}, started {time.strftime('%Y-%m-%d')} " in said, said
        assert f"its lock is {wd}/{LOCK}. Wait for it to end or stop it" in said
    finally:
        release(holder)
    assert not os.path.exists(os.path.join(wd, LOCK))  # released when the holder ended
    lock = acquire(wd)
    lock.release()
    assert os.listdir(wd) == []


def test_main_refuses_a_second_run_before_compiling_and_changes_nothing(tmp_path, finished_run):
    """The workdir of a finished run, held by another process: main.py (which would resume it) stops in one line,
    status 2, before compiling, and every file of the workdir is as it was."""
    import shutil

    wd = tmp_path / "wd"
    shutil.copytree(finished_run[0], wd)
    holder = lock_holder(wd)
    try:
        before = files(wd)
        r = run_main(wd, steps=6)
        after = files(wd)
    finally:
        release(holder)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-3000:]
    assert err[0].startswith(f"error: --workdir={wd} is in use by another run: process {holder.pid} on host "), err
    assert after == before


def test_both_processes_of_a_two_process_job_are_refused_and_only_process_0_looked(tmp_path):
    """A job of two JAX processes (the code path of a pod) on a held workdir: process 0 is refused and tells process
    1 through the coordination service; both stop in the same one line, status 2, and the holder's lock is as it
    was (process 1 never touched it)."""
    from test_multihost import start_two_processes

    wd = tmp_path / "wd"
    wd.mkdir()
    holder = lock_holder(wd)
    try:
        before = files(wd)
        procs = start_two_processes(str(wd), tiny_flags())
        outs = [p.communicate(timeout=300) for p in procs]
        after = files(wd)
    finally:
        release(holder)
    lines = [err.strip().splitlines() for _, err in outs]
    assert [p.returncode for p in procs] == [2, 2], lines
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    assert lines[0][0].startswith(f"error: --workdir={wd} is in use by another run: process {holder.pid} on host ")
    assert after == before


def kill_9(holder):
    holder.kill()  # SIGKILL: no release
    return holder.pid


def test_a_lock_left_by_kill_9_is_stale_at_once_on_the_same_host(tmp_path):
    wd = str(tmp_path)
    for reaped in (True, False):  # a dead process, and a zombie its parent has not reaped yet
        holder = lock_holder(wd)
        pid = kill_9(holder)
        if reaped:
            holder.wait()
        else:
            while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                pass  # until the kernel has made it a zombie
        assert read_holder(wd)[0]["pid"] == pid  # the lock is still there
        notes = []
        lock = acquire(wd, say=notes.append)
        host = socket.gethostname()
        assert len(notes) == 1, notes
        assert notes[0].startswith(f"note: took over the lock of --workdir={wd} from process {pid} on host {host}, ")
        assert notes[0].endswith(f"s ago): its process {pid} on this host ({host}) is gone"), notes
        assert read_holder(wd)[0]["token"] == lock.record["token"]
        lock.release()
        holder.wait()


def test_a_reused_pid_does_not_keep_a_lock(tmp_path):
    """The holder's pid now belongs to another process (this one): its start time differs, so the lock is stale."""
    wd = str(tmp_path)
    holder = lock_holder(wd)
    kill_9(holder)
    holder.wait()
    path = os.path.join(wd, LOCK)
    record = json.load(open(path))
    record.update(pid=os.getpid(), pid_start=record["pid_start"] - 1)  # as if the dead holder had had this pid
    open(path, "w").write(json.dumps(record))
    notes = []
    acquire(wd, say=notes.append).release()
    assert len(notes) == 1 and notes[0].endswith(
        f"its process {os.getpid()} on this host ({socket.gethostname()}) is gone"
    )


def test_a_lock_of_another_host_holds_while_its_heartbeat_runs_and_is_stale_after_the_lease(tmp_path):
    """The holder's record rewritten as another host's (its token kept, so its heartbeat thread goes on touching
    it): set 20 minutes back, the holder's heartbeat makes it recent again and a second run is refused; the holder
    killed (the host lost) and its lock 11 minutes old, the next run takes it over and says why."""
    wd = str(tmp_path)
    path = os.path.join(wd, LOCK)
    holder = lock_holder(wd, heartbeat_s=0.05)
    try:
        record = dict(json.load(open(path)), host="another-host", boot_id="another-boot", pid=4242)
        open(path, "w").write(json.dumps(record))
        past = time.time() - 20 * 60
        os.utime(path, (past, past))
        while os.stat(path).st_mtime < past + 60:
            assert holder.poll() is None
        with pytest.raises(WorkdirLocked, match="process 4242 on host another-host, started "):
            acquire(wd)
    finally:
        kill_9(holder)
        holder.wait()
    past = time.time() - 11 * 60
    os.utime(path, (past, past))
    notes = []
    acquire(wd, say=notes.append).release()
    assert len(notes) == 1 and notes[0].endswith(
        ": its holder is on another host or an earlier boot (another-host) and sent no heartbeat for 11 min (such a "
        "lock is stale after 10 min without one)"
    ), notes
    assert not os.path.exists(path)
