"""Preemption, kill -9, divergence and bad configs, with real subprocesses and real signals: none may cost a run."""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import main_cmd, restore_checkpoint, tiny_flags

STEPS_FOREVER = 100_000


def tiny_cmd(workdir, *args, steps=4, **over):
    flags = tiny_flags(**{"train.num_steps": steps, "train.ckpt_every": 1000, "train.log_every": 2, **over})
    return main_cmd(f"--workdir={workdir}", *flags, *args)


def run(workdir, *args, **kw):
    return subprocess.run(tiny_cmd(workdir, *args, **kw), capture_output=True, text=True, timeout=300)


def start(workdir, *args, **kw):
    return subprocess.Popen(tiny_cmd(workdir, *args, **kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(pred, proc, timeout=240):
    t0 = time.time()
    while not pred():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() - t0 < timeout
        time.sleep(0.01)


def metrics_lines(wd):
    p = os.path.join(wd, "metrics.jsonl")
    return len(open(p).readlines()) if os.path.exists(p) else 0


def assert_states_equal(a, b):
    import jax

    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) > 100
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_sigterm_kill_9_and_sigint_never_cost_the_run_and_resume_exactly(tmp_path):
    """SIGTERM stops a run with a checkpoint; the same command resumes it and is killed with -9 while writing a
    checkpoint; the same command resumes from the last complete one and SIGINT stops it at N; its checkpoint N
    equals that of a run of N steps without interruption."""
    wd = str(tmp_path / "preempted")
    ck = os.path.join(wd, "checkpoints")
    lock = os.path.join(wd, ".lock")  # training/lock.py

    def started(proc):
        seen = metrics_lines(wd)
        wait_for(lambda: metrics_lines(wd) > seen, proc)  # training is under way

    def stop(proc, sig):
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        m = re.search(rf"Stopped by {sig.name} at step (\d+): checkpoint \1 is in", out)
        assert m, out + err[-2000:]
        assert m.group(1) in os.listdir(ck)
        assert not os.path.exists(os.path.join(wd, "samples"))  # a stopped run does not spend its notice on samples
        assert not os.path.exists(lock)  # released on the signal's way out
        return int(m.group(1)), out + err

    proc = start(wd, steps=STEPS_FOREVER)
    started(proc)
    n1, _ = stop(proc, signal.SIGTERM)
    # benchmarks/samplers.py reads such an exit (status 0) as "not trained": it does not evaluate a stopped run
    from benchmarks.samplers import not_trained

    with pytest.raises(SystemExit, match=rf"error: uniform seed 0 stopped at step {n1} of {STEPS_FOREVER} .*resume"):
        not_trained(wd, STEPS_FOREVER, "uniform seed 0")
    not_trained(wd, n1, "uniform seed 0")  # trained to its end: passes

    proc = start(wd, steps=STEPS_FOREVER, **{"train.ckpt_every": 1, "train.keep_checkpoints": 100})
    while True:  # freeze the process while a checkpoint is being written (the write cannot finish), then kill it
        wait_for(lambda: any("tmp" in d for d in os.listdir(ck)) and len(os.listdir(ck)) > 3, proc)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # the stop has landed
        if any("tmp" in d for d in os.listdir(ck)):
            break
        proc.send_signal(signal.SIGCONT)  # the write finished between the look and the stop: try the next one
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = [d for d in os.listdir(ck) if "tmp" in d]
    last = max(int(d) for d in os.listdir(ck) if d.isdigit())
    assert partial and last > n1  # killed in the middle of a write, after complete ones
    killed = proc.pid
    assert json.load(open(lock))["pid"] == killed  # left behind, stale: its process is gone

    proc = start(wd, steps=STEPS_FOREVER)
    started(proc)
    n2, out = stop(proc, signal.SIGINT)
    assert f"Resuming from checkpoint step {last}" in out and n2 > last
    assert "(last heartbeat " in out and f"): its process {killed} on this host (" in out  # the note of the takeover
    assert not [d for d in os.listdir(ck) if "tmp" in d]  # the half-written checkpoint is gone, never read
    steps = [json.loads(line)["step"] for line in open(os.path.join(wd, "metrics.jsonl"))]
    assert steps == sorted(set(steps)) and steps[-1] == n2  # no duplicate records from the killed attempt

    straight = str(tmp_path / "straight")
    assert run(straight, steps=n2).returncode == 0
    (sa, a), (sb, b) = restore_checkpoint(wd), restore_checkpoint(straight)
    assert sa == sb == n2
    assert_states_equal(a, b)  # model, optimizer, EMA, the learned sampler's policy, buffer and S, RNG


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_divergence_stops_keeps_the_last_good_checkpoint_and_resumes_with_a_lower_lr(tmp_path):
    wd = str(tmp_path / "diverged")
    over = {"train.ckpt_every": 1, "train.log_every": 1, "sampler.name": "uniform"}
    assert run(wd, steps=1, **over).returncode == 0  # a good first step and its checkpoint
    r = run(wd, steps=4, **{**over, "train.lr": 1e30})  # the same workdir: step 1 blows the parameters up
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()[-1]
    assert "step 1: non-finite parameters" in err and "the last good checkpoint is step 1" in err, err
    assert sorted(os.listdir(os.path.join(wd, "checkpoints"))) == ["1"]
    r = run(wd, steps=4, **over)  # the same workdir with the default learning rate
    assert r.returncode == 0 and "Resuming from checkpoint step 1" in r.stdout, r.stderr[-3000:]
    assert sorted(os.listdir(os.path.join(wd, "checkpoints")))[-1] == "4"


@pytest.mark.parametrize(
    "flag,suggestion",
    [
        ("--config.sampler.nme=uniform", "did you mean config.sampler.name?"),
        ("--config.sampler.adaptive.update_evry=3", "did you mean config.sampler.adaptive.update_every?"),
        ("--config.train.learning_rate=0.1", "did you mean config.train.lr?"),
    ],
)
def test_an_unknown_override_is_one_line_with_the_nearest_field(tmp_path, flag, suggestion):
    r = subprocess.run(main_cmd(f"--workdir={tmp_path}/w", flag), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "is not a config field" in err[0] and suggestion in err[0], r.stderr[-2000:]
    assert not os.path.exists(tmp_path / "w")


def test_checkpoint_of_a_different_model_is_a_clear_error(tmp_path, finished_run):
    wd = str(tmp_path / "other")
    shutil.copytree(finished_run[0], wd)  # checkpoint 4 of the tiny default
    guard = os.path.join(wd, "run_config.json")  # made to agree with the new config: restore itself must say it
    ident = json.load(open(guard))
    ident["model"]["ch"] = 16
    with open(guard, "w") as f:
        json.dump(ident, f)
    r = run(wd, steps=8, **{"model.ch": 16})
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "checkpoint 4 does not fit this config's train state" in err[0], r.stderr[-3000:]


def test_a_bad_config_variant_is_one_line(tmp_path):
    r = subprocess.run(
        main_cmd(f"--workdir={tmp_path}/w", config="configs/cifar10.py:linear,p3"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "'linear,p3' is not a variant" in err[0] and "adaptive+min_snr" in err[0], r.stderr
