"""Two JAX processes of 4 CPU devices each (gloo collectives on 127.0.0.1), the code path of a TPU pod, train the
tiny default to the same state as one process of 8 devices."""

import json
import os
import socket
import subprocess

import numpy as np
import pytest

from conftest import main_cmd, restore_checkpoint, tiny_flags


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_two_processes(wd, flags):
    """main.py as two JAX processes of 4 CPU devices each, coordinated on a free local port."""
    port = free_port()
    xla = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env = dict(os.environ, XLA_FLAGS=" ".join([*xla, "--xla_force_host_platform_device_count=4"]))
    return [
        subprocess.Popen(
            main_cmd(
                f"--workdir={wd}",
                *flags,
                "--distributed",
                f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2",
                f"--process_id={i}",
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_two_processes_of_four_devices_equal_one_process_of_eight(tmp_path, finished_run):
    import jax

    wd = str(tmp_path / "two_hosts")
    flags = tiny_flags(**{"train.num_steps": 4, "train.ckpt_every": 4})  # as the one-process run of finished_run
    procs = start_two_processes(wd, flags)
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    # process 0 alone writes metrics, samples and pictures; both wrote their shards of the checkpoint
    assert "Samples:" in outs[0][0] and "Samples:" not in outs[1][0]
    assert not os.path.exists(os.path.join(wd, ".lock"))  # process 0 took the job's lock and released it
    rows = [json.loads(line) for line in open(os.path.join(wd, "metrics.jsonl"))]
    one = [json.loads(line) for line in open(finished_run[0] / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [2, 4] and sum(rows[0]["t_hist"]) == 2 * 16
    np.testing.assert_allclose([r["loss"] for r in rows], [r["loss"] for r in one], rtol=1e-4)
    (_, two), (_, eight) = restore_checkpoint(wd, 4), restore_checkpoint(finished_run[0], 4)
    for key, rtol, atol in (
        ("params", 2e-4, 2e-6),
        ("ema_params", 2e-4, 2e-6),
        ("opt_state", 2e-4, 2e-6),
        ("sampler_state", 2e-3, 2e-5),
    ):
        a, b = jax.tree.leaves(two[key]), jax.tree.leaves(eight[key])
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=key)
    assert int(two["step"]) == 4


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_a_signal_to_one_process_stops_both_at_the_same_step_with_a_checkpoint(tmp_path):
    """SIGTERM reaches process 1 only: both processes agree at the next multiple of train.stop_check_every (no
    collective on the steps between), stop there, and write that step's checkpoint; the same command resumes."""
    import re
    import signal
    import time

    wd = str(tmp_path / "two_hosts")
    every = 3
    flags = tiny_flags(
        **{
            "train.num_steps": 100_000,
            "train.ckpt_every": 100_000,
            "train.log_every": 1,
            "train.stop_check_every": every,
            # the agreement on a stop needs no sampler with a periodic update (the test above has the learned
            # sampler's state across processes); uniform compiles one step program instead of two
            "sampler.name": "uniform",
        }
    )
    procs = start_two_processes(wd, flags)
    metrics = os.path.join(wd, "metrics.jsonl")
    t0 = time.time()
    try:
        while not (os.path.exists(metrics) and len(open(metrics).readlines()) >= 2):  # training is under way
            assert all(p.poll() is None for p in procs) and time.time() - t0 < 300, "training did not start"
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=240) for p in procs]
    except (AssertionError, subprocess.TimeoutExpired):
        for p in procs:
            p.kill()
        logs = [p.communicate()[1][-3000:] for p in procs]
        raise AssertionError(f"the two processes did not stop together: {logs}") from None
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]  # both stopped cleanly (a process left behind would hang the other)
    assert not os.path.exists(os.path.join(wd, ".lock"))  # released on the signal's way out
    # process 0 reports for the run: it stopped on process 1's signal, at a step where the processes compare flags
    m = re.search(r"Stopped by another process's signal at step (\d+): checkpoint \1 is in", outs[0][0])
    assert m, outs[0][0] + outs[0][1][-2000:]
    step = int(m.group(1))
    assert step % every == 0 and os.listdir(os.path.join(wd, "checkpoints")) == [str(step)]
    rows = [json.loads(line) for line in open(metrics)]
    assert rows[-1]["step"] == step  # nothing was trained past the checkpoint
