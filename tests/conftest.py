"""Tests run on 8 fake CPU devices (set before JAX starts)."""

import os
import subprocess
import sys
import tempfile

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    + [
        "--xla_force_host_platform_device_count=8",
        # LLVM's optimisation of the (partitionable) threefry PRNG dominates compile time on CPU at the default
        # level, not at level 0 (docs/benchmarks/tests.md). Tests compile many small programs and run few steps.
        "--xla_backend_optimization_level=0",
        # XLA CPU's older elemental emitters compile the tiny default's programs faster than its MLIR fusion
        # emitters (docs/benchmarks/tests.md); the tests compare programs with each other and with closed forms,
        # never with code from the other emitters.
        "--xla_cpu_use_fusion_emitters=false",
        # XLA CPU aborts the process (SIGABRT) when a device's thread reaches a collective more than 40 s after the
        # others (rendezvous termination timeout, openxla/xla#32115): with 8 device threads per process on 2 cores
        # and another test process compiling, a thread can be kept off the CPU that long. A deadlock still ends, in
        # 10 minutes; tests/test_xla_cpu.py shows the abort itself. Subprocesses inherit these flags.
        "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120",
        "--xla_cpu_collective_call_terminate_timeout_seconds=600",
    ]
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Identical programs (the same config built again, e.g. a resumed run) compile once per test session.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="jax_cache_"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from core.host_malloc import keep_freed_memory  # noqa: E402

# the entry points' default (config.host_malloc="reuse"): XLA's freed CPU buffers reused, not mapped afresh (under
# pytest-xdist the worker's own thread has an arena already, so XLA's threads reuse only part of them: the tests'
# numbers do not depend on it, their time does a little)
keep_freed_memory()

# The default config with a tiny UNet and sampler and a short run: shared by every test (and by main.py runs in
# subprocesses, as flags) so that they compile the same programs, which the compilation cache then serves.
TINY = {
    "model.ch": 8,
    "model.ch_mult": (1,),
    "model.attn_resolutions": (8,),
    "model.num_groups": 4,
    "train.batch_size": 16,
    "train.num_steps": 4,
    "train.log_every": 2,
    "train.ckpt_every": 2,
    "train.warmup_steps": 2,
    "sample.num": 4,
    "sample.method": "ddim",
    "sample.steps": 5,
    "diagnostics.t_bins": 10,
    "sampler.adaptive.probe_batch_size": 8,
    "sampler.adaptive.policy_channels": (8, 16),
    "sampler.adaptive.policy_hidden": (32,),
    "sampler.adaptive.sweep_stride": 50,
    "sampler.adaptive.update_every": 2,
}


def tiny_config(**overrides):
    """tiny config; overrides such as {"train.num_steps": 4}."""
    from config.fields import override
    from configs.default import get_config

    return override(get_config(), {**TINY, **overrides})


def tiny_flags(**overrides):
    """The same as command-line flags for main.py."""
    return [f"--config.{k}={v}".replace(" ", "") for k, v in {**TINY, **overrides}.items()]


def full_and_resumed(c, workdir, steps: int = 6, resumed_workers: int = 0):
    """(setup, state after `steps` steps in one go, state after steps / 2, a real orbax checkpoint restored into a
    fresh state by a fresh manager, and steps / 2 more), both on the host: the exact-resume tests' comparison. The
    programs are those the training loop runs (Setup.step_for), the batches its step-indexed iterator's, loaded in
    this process for the uninterrupted run and with resumed_workers Grain worker processes (config.data.workers)
    for the interrupted one."""
    import jax

    from data import load_split
    from data.pipeline import BatchIterator
    from training import checkpoint as ckpt
    from training.setup import build, initial_state

    setup = build(c)
    src = load_split(c.data, "train")

    def run(state, start, stop, workers=0):
        it = BatchIterator(
            src,
            c.seed,
            c.train.batch_size,
            setup.batch_sharding,
            start_step=start,
            random_flip=c.data.get("random_flip", False),
            workers=workers,
        )
        try:
            for step in range(start, stop):
                state, _ = setup.step_for(step)(state, next(it)[1])
        finally:
            it.close()
        return state

    half_way = steps // 2
    mngr = ckpt.make_manager(c, str(workdir))
    full = jax.device_get(run(initial_state(setup), 0, steps))
    half = run(initial_state(setup), 0, half_way, resumed_workers)
    ckpt.save(mngr, half_way, half)
    mngr.close()
    mngr = ckpt.make_manager(c, str(workdir))  # a fresh manager, as a new process would have
    abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
    restored = ckpt.restore(mngr, mngr.latest_step(), abstract, "")
    mngr.close()
    return setup, full, jax.device_get(run(restored, half_way, steps, resumed_workers))


@pytest.fixture
def tiny():
    return tiny_config


def main_cmd(*args, config="configs/default.py"):
    """The command line of main.py with a config file under the repository (and an optional :argument)."""
    return [sys.executable, os.path.join(ROOT, "main.py"), f"--config={ROOT}/{config}", *args]


def run_main(workdir, *args, steps=4, cwd=ROOT):
    cmd = main_cmd(f"--workdir={workdir}", *tiny_flags(**{"train.num_steps": steps, "train.ckpt_every": 4}), *args)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """(workdir, CompletedProcess) of a finished 4-step tiny run, made once per test session and shared by the xdist
    workers (under a file lock in their common temporary folder); tests copy it before changing it."""
    import fcntl
    import json

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp is a folder of the session's
        root = root.parent
    base, done = root / "e2e", root / "e2e.json"
    with open(root / "e2e.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            base.mkdir(exist_ok=True)
            r = run_main("wd", cwd=base)  # a relative workdir, as README.md's quickstart uses
            assert r.returncode == 0, r.stderr[-3000:]
            done.write_text(json.dumps(dict(args=r.args, returncode=r.returncode, stdout=r.stdout, stderr=r.stderr)))
    r = subprocess.CompletedProcess(**json.loads(done.read_text()))
    return base / "wd", r


def files(folder) -> dict:
    """{relative path: bytes} of every file under `folder`."""
    out = {}
    for d, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


# A process that holds a workdir's lock (training/lock.py) until its stdin is closed.
HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from training.lock import acquire
lock = acquire(sys.argv[2], heartbeat_s=float(sys.argv[3]))
print("held", flush=True)
sys.stdin.read()
lock.release()
"""


def lock_holder(workdir, heartbeat_s: float = 60.0):
    """A real second process holding `workdir`'s lock (subprocess.Popen), once it holds it; closing its stdin makes
    it release the lock and exit."""
    cmd = [sys.executable, "-c", HOLDER, ROOT, str(workdir), str(heartbeat_s)]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def restore_checkpoint(workdir, step=None):
    """(step, state as a dict of arrays on one device) of a workdir's checkpoint (the latest by default), whatever
    the device topology that wrote it."""
    import jax
    import orbax.checkpoint as ocp

    ck = os.path.join(str(workdir), "checkpoints")
    step = step if step is not None else max(int(s) for s in os.listdir(ck) if s.isdigit())
    path = os.path.join(ck, str(step), "default")
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(path)
        meta = getattr(meta, "item_metadata", meta)
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)
        return step, ckptr.restore(path, target)


# The files whose tests take longest, longest first: each file's summed time of the tests that the default command runs
# (not those marked slow) in a serial run on one core (docs/benchmarks/tests.md has the times and the command). With
# `--dist loadfile` a file is one unit of work, and xdist by default queues the files with the most tests first, which
# can leave a long file to start last, on one worker, while the other waits. Longest first, the long files overlap
# each other and the short ones fill the gaps.
SLOW_FILES_FIRST = (
    "test_adaptive.py",
    "test_resume.py",
    "test_latent.py",
    "test_edm.py",
    "test_adaptive_options.py",
    "test_eval.py",
    "test_published.py",
    "test_baselines.py",
    "test_train.py",
    "test_continuous.py",
    "test_conditional.py",
    "test_main.py",
    "test_faults.py",
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = os.path.basename(str(item.path))
        return SLOW_FILES_FIRST.index(name) if name in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

    items.sort(key=rank)  # stable: the tests of a file keep their order, the other files theirs
