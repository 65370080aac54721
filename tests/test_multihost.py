"""Two JAX processes of 4 CPU devices each (gloo collectives on 127.0.0.1), the code path of a TPU pod, train the
tiny default to the same state as one process of 8 devices."""

import json
import os
import socket
import subprocess

import numpy as np

from conftest import main_cmd, restore_checkpoint, tiny_flags


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_of_four_devices_equal_one_process_of_eight(tmp_path, finished_run):
    import jax

    wd = str(tmp_path / "two_hosts")
    port = free_port()
    env = dict(
        os.environ,
        XLA_FLAGS=" ".join(
            [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
            + ["--xla_force_host_platform_device_count=4"]
        ),
    )
    flags = tiny_flags(**{"train.num_steps": 4, "train.ckpt_every": 4})  # as the one-process run of finished_run
    procs = [
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
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    # process 0 alone writes metrics, samples and pictures; both wrote their shards of the checkpoint
    assert "Samples:" in outs[0][0] and "Samples:" not in outs[1][0]
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
