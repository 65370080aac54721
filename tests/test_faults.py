"""Faults a user meets, injected for real: a damaged newest checkpoint, a disk that fills during a checkpoint write,
a corrupt data record, a workdir without run_config.json, --help, a compile before the latents exist. Real orbax
checkpoints, real files and file systems, real subprocesses; nothing here waits on a clock."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid

import numpy as np
import pytest

from conftest import ROOT, files, main_cmd, tiny_flags


def run(workdir, steps, mode="train", **over):
    flags = tiny_flags(**{"train.num_steps": steps, "train.ckpt_every": 2, "train.log_every": 2, **over})
    cmd = main_cmd(f"--workdir={workdir}", f"--mode={mode}", *flags)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def steps_in(wd):
    return sorted(int(s) for s in os.listdir(os.path.join(wd, "checkpoints")) if s.isdigit())


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A tiny run's workdir with checkpoints 2 and 4 (tests copy it)."""
    wd = str(tmp_path_factory.mktemp("faults") / "wd")
    r = run(wd, steps=4)
    assert r.returncode == 0 and steps_in(wd) == [2, 4], r.stderr[-3000:]
    return wd


def truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def truncate_array_files(ck):
    d = os.path.join(ck, "default", "ocdbt.process_0", "d")
    for name in os.listdir(d):
        truncate(os.path.join(d, name), 10)  # as a write cut off by a full disk leaves them


# damage -> (how, what the one line must say about why)
DAMAGE = {
    "sharding_invalid_json": (lambda ck: truncate(os.path.join(ck, "default", "_sharding"), 20), r"_sharding.*JSON"),
    "array_files_truncated": (truncate_array_files, r"OCDBT|byte range"),
    "array_metadata_missing": (lambda ck: os.remove(os.path.join(ck, "default", "_METADATA")), r"_METADATA.*missing"),
}


@pytest.mark.slow  # three runs from the fixture's checkpoints, 20 s each: CI's second job
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_named_kept_and_the_one_below_resumes(two_checkpoints, tmp_path, damage):
    wd = str(tmp_path / "wd")
    shutil.copytree(two_checkpoints, wd)
    how, why = DAMAGE[damage]
    how(os.path.join(wd, "checkpoints", "4"))
    damaged = files(os.path.join(wd, "checkpoints", "4"))
    r = run(wd, steps=6)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stderr.splitlines() if "is damaged (" in line]
    assert len(said) == 1 and said[0].startswith(f"checkpoint 4 in {wd}/checkpoints is damaged ("), r.stderr[-3000:]
    assert re.search(why, said[0]) and "Traceback" not in r.stderr, said[0]
    assert f"moved to {wd}/checkpoints_damaged/4, not deleted" in said[0]
    assert "Resuming from checkpoint step 2" in r.stdout
    assert files(os.path.join(wd, "checkpoints_damaged", "4")) == damaged  # kept byte for byte
    assert steps_in(wd) == [2, 4, 6]  # 4 and 6 written again from step 2
    records = [json.loads(line)["step"] for line in open(os.path.join(wd, "metrics.jsonl"))]
    assert records == [2, 4, 6]  # the records of the lost attempt past step 2 were replaced, not duplicated


@pytest.mark.slow  # over 20 s: CI's second job
def test_missing_checkpoint_metadata_is_not_damage(two_checkpoints, tmp_path):
    """_CHECKPOINT_METADATA (orbax's record of when a step was written) gone: the arrays read, the run resumes from
    that checkpoint."""
    wd = str(tmp_path / "wd")
    shutil.copytree(two_checkpoints, wd)
    os.remove(os.path.join(wd, "checkpoints", "4", "_CHECKPOINT_METADATA"))
    r = run(wd, steps=6)
    assert r.returncode == 0 and "Resuming from checkpoint step 4" in r.stdout, r.stderr[-3000:]
    assert not os.path.exists(os.path.join(wd, "checkpoints_damaged"))


@contextlib.contextmanager
def small_disk(tmp_path):
    """(folder, fill, empty): a 16 MiB tmpfs mounted at a folder (root), else a folder under RLIMIT_FSIZE, which
    makes a write past the limit fail with EFBIG (File too large) as a full disk fails with ENOSPC. fill() returns
    the subprocess preexec_fn that limits the next run (None for tmpfs, filled with a file)."""
    folder = str(tmp_path / "disk")
    os.makedirs(folder)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", folder], capture_output=True)
    filler = os.path.join(folder, "filler")

    def fill():
        if mounted.returncode != 0:
            import resource
            import signal

            def limit():
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death by signal
                resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))  # below a checkpoint's largest file

            return limit
        free = shutil.disk_usage(folder).free
        with open(filler, "wb") as f:  # leave 64 KiB: the checkpoint write runs out part way
            f.write(b"\0" * (free - (64 << 10)))
        return None

    try:
        yield folder, fill, lambda: os.path.exists(filler) and os.remove(filler)
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", folder], check=False)


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_a_disk_that_fills_during_a_checkpoint_write_is_one_line_and_the_next_run_resumes(two_checkpoints, tmp_path):
    with small_disk(tmp_path) as (disk, fill, empty):
        wd = os.path.join(disk, "wd")
        shutil.copytree(two_checkpoints, wd)
        before = {s: files(os.path.join(wd, "checkpoints", str(s))) for s in (2, 4)}
        limit = fill()
        flags = tiny_flags(**{"train.num_steps": 6, "train.ckpt_every": 2, "train.log_every": 2})
        r = subprocess.run(
            main_cmd(f"--workdir={wd}", *flags), capture_output=True, text=True, timeout=300, preexec_fn=limit
        )
        assert r.returncode == 1, r.stderr[-3000:]
        err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        assert err[0].startswith(f"error: checkpoint 6 could not be written to {wd}/checkpoints ("), err[0]
        assert re.search(r"\((No space left on device|File too large) writing ", err[0]), err[0]
        assert re.search(r"; \d+\.\d MiB free of \d+\.\d MiB there; checkpoints 2, 4 are intact\.", err[0]), err[0]
        assert {s: files(os.path.join(wd, "checkpoints", str(s))) for s in (2, 4)} == before
        empty()
        r = run(wd, steps=6)
        assert r.returncode == 0 and "Resuming from checkpoint step 4" in r.stdout, r.stderr[-3000:]
        assert steps_in(wd)[-1] == 6 and not [d for d in os.listdir(os.path.join(wd, "checkpoints")) if "tmp" in d]


@pytest.mark.slow  # the fixture's one user outside the slow job, which pays its 30 s run: CI's second job
def test_a_workdir_with_checkpoints_but_no_run_config_is_refused(two_checkpoints, tmp_path):
    wd = str(tmp_path / "wd")
    shutil.copytree(two_checkpoints, wd)
    os.remove(os.path.join(wd, "run_config.json"))
    before = files(wd)
    r = run(wd, steps=6)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and f"--workdir={wd} holds checkpoints 2, 4 but no run_config.json" in err[0], r.stderr
    assert files(wd) == before  # not re-created, nothing touched


@contextlib.contextmanager
def read_only_copy(src, tmp_path):
    """A copy of folder `src` that cannot be written: on a tmpfs mounted read-only (root), else without write
    permission (any other user; root ignores permissions)."""
    folder = str(tmp_path / "ro")
    os.makedirs(folder)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", folder], capture_output=True)
    if mounted.returncode != 0 and os.geteuid() == 0:
        pytest.skip("root without mount: a folder root cannot write is not available")
    wd = os.path.join(folder, "wd")
    shutil.copytree(src, wd)
    if mounted.returncode == 0:
        subprocess.run(["mount", "-o", "remount,ro", folder], check=True)
    else:
        for d, _, _ in os.walk(wd):
            os.chmod(d, 0o555)
    try:
        yield wd
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", folder], check=False)
        else:
            for d, _, _ in os.walk(wd):
                os.chmod(d, 0o755)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_workdir_that_cannot_be_written_is_one_line_before_compiling(finished_run, tmp_path, mode):
    """A finished run's workdir on a read-only mount: resuming it and evaluating it both stop in one line naming
    the workdir and the reason, status 2, before anything compiles (--mode=eval, which writes eval/, computed the
    bound and samples first and then failed with a traceback)."""
    with read_only_copy(finished_run[0], tmp_path) as wd:
        r = run(wd, steps=6) if mode == "train" else run(wd, 4, **{"eval.nll_images": 16}, mode=mode)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-3000:]
    inside = " (eval/ in it)" if mode == "eval" else ""
    assert re.fullmatch(
        rf"error: --workdir='{wd}' cannot be written{re.escape(inside)}: (Read-only file system|Permission denied)",
        err[0],
    ), err


def write_images(folder, n, bad):
    from PIL import Image

    os.makedirs(folder)
    rng = np.random.default_rng(0)
    for i in range(n):
        path = os.path.join(folder, f"{i:03d}.png")
        if i == bad:
            open(path, "wb").write(b"\x89PNG\r\n\x1a\n not an image")  # a PNG signature, then garbage
        else:
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(path)


def test_an_undecodable_image_in_a_folder_is_one_line_naming_the_record(tmp_path):
    """16 images, batch 16: the first step reads every one, and record 11 is not an image."""
    write_images(str(tmp_path / "images"), 16, bad=11)
    config = tmp_path / "folder_config.py"
    config.write_text(
        "from config.schema import default_config\n\n\ndef get_config():\n    return default_config(data='folder')\n"
    )
    over = {"data.train_dir": tmp_path / "images", "data.image_size": 8, "data.channels": 1, "data.random_flip": False}
    flags = [*tiny_flags(**{"train.num_steps": 2}), *(f"--config.{k}={v}" for k, v in over.items())]
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--config={config}", f"--workdir={tmp_path}/wd", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 1 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert err[0].startswith(f"error: config.data.name='folder', split 'train', record 11: {tmp_path}/images/011.png: ")
    assert "UnidentifiedImageError" in err[0]


def test_a_corrupt_array_record_chunk_names_its_record(tmp_path, tiny):
    """Bytes of the test split's array_record file flipped: the batch that reads the damaged record names it, and
    that record alone fails to read where its neighbours read."""
    from data import CorruptRecord, load_split
    from data.digits_builder import prepare

    prepare(str(tmp_path))
    c = tiny(**{"data.name": "digits_tfds", "data.data_dir": str(tmp_path)})
    folder = os.path.join(str(tmp_path), "digits", "1.0.0")
    (file,) = [os.path.join(folder, f) for f in os.listdir(folder) if "test.array_record" in f]
    data = bytearray(open(file, "rb").read())
    data[2000:2004] = bytes(b ^ 0xFF for b in data[2000:2004])  # inside a record's chunk, past the file's header
    open(file, "wb").write(bytes(data))
    src = load_split(c.data, "test")
    with pytest.raises(CorruptRecord) as e:
        src.get(np.arange(297))
    k = e.value.index
    assert str(e.value).startswith(f"config.data.name='digits_tfds', split 'test', record {k}: RuntimeError: ")
    assert "Corrupted" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CorruptRecord):
        src.get([k])
    assert src.get([k - 1, k + 1]).shape == (2, 8, 8, 1)


@pytest.mark.parametrize("cmd", [["main.py"], ["-m", "data.encode_latents"]])
def test_help_exits_0(cmd):
    r = subprocess.run([sys.executable, *cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--" in r.stdout + r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, *cmd, "--no_such_flag"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0


def test_a_latent_config_compiles_before_its_latents_exist(capsys):
    """The embedded MNIST latent config with a transformer of one block: compiled for the latents it describes,
    saying what it assumed; nothing is written where the latents would go."""
    import main
    from config.fields import override
    from configs import mnist_latent

    missing = f"/nonexistent/latents_{uuid.uuid4().hex}"
    c = override(
        mnist_latent.get_config("uvit,uniform"),
        {"data.path": missing, "model.depth": 1, "model.hidden_size": 32, "train.batch_size": 16},
    )
    assert main.run(c, None, "compile") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"assumed: no latents at config.data.path={missing!r} yet (no meta.json), so the step is compiled for 7x7x4 "
        "float32 latents (config.data.image_size, config.data.channels) with 10 classes (config.data.num_classes), "
        "batch [16, 7, 7, 4]"
    )
    assert out[1].startswith("train step (every step): uniform sampler, batch 16,") and "FLOPs per step" in out[-1]
    assert not os.path.exists(missing)


def test_the_latent_edm_variant_is_edm2s_setting_at_the_latents_scale_and_compiles(capsys):
    """configs/mnist_latent.py:dit,lognormal,edm: sigma_data 1 (unit-std latents), EDM2's latent log-normal moved to
    that scale (ln sigma ~ N(-0.4 + ln 2, 1)), no learned variance (DiT outputs C channels), Heun; a bad process is
    one line naming the variant and what is allowed."""
    import main
    from config.fields import override
    from configs import mnist_latent

    c = mnist_latent.get_config("dit,lognormal,edm")
    assert (c.diffusion.name, c.diffusion.sigma_data, c.sample.method, c.eval.fid.method) == (
        "edm",
        1.0,
        "heun",
        "heun",
    )
    assert c.sampler.lognormal.mean == pytest.approx(0.2931471806) and c.sampler.lognormal.std == 1.0
    assert "variance" not in c.diffusion and c.eval.periodic.nll_images == c.eval.nll_images == 200
    missing = f"/nonexistent/latents_{uuid.uuid4().hex}"
    c = override(c, {"data.path": missing, "model.depth": 1, "model.hidden_size": 32, "train.batch_size": 16})
    assert main.run(c, None, "compile") == 0
    assert "train step (every step): lognormal sampler, batch 16," in capsys.readouterr().out
    with pytest.raises(ValueError, match="PROCESS one of ddpm, edm"):
        mnist_latent.get_config("dit,lognormal,flow")


def test_a_corrupt_record_read_in_a_loader_worker_is_raised_in_the_main_process(tmp_path, tiny):
    from data import CorruptRecord
    from data.folder import FolderSource
    from data.pipeline import BatchIterator
    from training.mesh import batch_sharding, make_mesh

    write_images(str(tmp_path / "images"), 16, bad=11)
    src = FolderSource(str(tmp_path / "images"), 8, 1, False, 0, "train")
    it = BatchIterator(src, 0, 16, batch_sharding(make_mesh(tiny().mesh)), workers=1)
    try:
        with pytest.raises(CorruptRecord) as e:
            next(it)  # step 0 reads all 16
    finally:
        it.close()
    assert (e.value.dataset, e.value.split, e.value.index) == ("folder", "train", 11)
    assert str(e.value).startswith(f"config.data.name='folder', split 'train', record 11: {tmp_path}/images/011.png")


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="recvfrom's syscall number is per arch")
def test_a_stop_signal_landing_on_another_thread_does_not_fail_its_blocking_c_call():
    """The kernel may deliver SIGTERM to any thread, e.g. one of gloo's in recv(). Here a thread blocks in libc's
    recv (a C call: Python's retry on EINTR, PEP 475, does not cover it), the signal is sent to that thread while it
    waits there, and the call goes on to return the byte sent after (SA_RESTART), while the run's stop flag is set."""
    import ctypes
    import signal
    import socket
    import threading

    from training.preemption import StopRequest

    recvfrom = {"x86_64": 45, "aarch64": 207}[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = socket.socketpair()
    out = {}

    def reader():
        out["tid"] = threading.get_native_id()
        buf = ctypes.create_string_buffer(1)
        out["n"] = libc.recv(a.fileno(), buf, 1, 0)
        out["errno"] = ctypes.get_errno()

    with StopRequest() as stop:
        t = threading.Thread(target=reader)
        t.start()
        while "tid" not in out or not open(f"/proc/self/task/{out['tid']}/syscall").read().startswith(f"{recvfrom} "):
            pass  # until the thread is inside recv (no clock involved)
        signal.pthread_kill(t.ident, signal.SIGTERM)
        b.send(b"x")
        t.join(60)
        assert stop.requested(1) and stop.name == "SIGTERM"
    a.close()
    b.close()
    assert out["n"] == 1, f"recv failed with errno {out['errno']} (EINTR is {__import__('errno').EINTR})"


def test_orbax_errors_collected_after_a_failed_read_are_silent_and_others_still_reported(tmp_path):
    """After a failed block of _quiet_orbax, an error raised in orbax's code that nobody retrieves (a coroutine of
    the failed read, collected later: Python hands it to sys.unraisablehook) goes nowhere; one from other code
    still reaches the hook that was there before; after a good block the hooks are back as they were. The 'orbax'
    frame is real code compiled under a path with an orbax folder."""
    import gc
    import logging

    from absl import logging as absl_logging

    from training.checkpoint import _quiet_orbax

    def leaking(folder):  # an object whose __del__ raises, its code in `folder`/leak.py
        scope = {}
        code = "class Leak:\n    def __del__(self):\n        raise ValueError('read failed')\n"
        exec(compile(code, str(tmp_path / folder / "leak.py"), "exec"), scope)
        return scope["Leak"]()

    saved = sys.unraisablehook, threading.excepthook, sys.excepthook
    verbosity, aio = absl_logging.get_verbosity(), logging.getLogger("asyncio").level
    reported = []
    sys.unraisablehook = lambda u: reported.append(u.exc_value)
    try:
        with pytest.raises(KeyError), _quiet_orbax():
            raise KeyError("a failed read")
        leak = leaking("orbax")
        del leak
        gc.collect()
        assert reported == []
        other = leaking("elsewhere")
        del other
        gc.collect()
        assert [str(e) for e in reported] == ["read failed"]
        sys.unraisablehook = recorder = lambda u: None
        with _quiet_orbax():
            pass
        assert sys.unraisablehook is recorder
    finally:  # the failed block left its hooks and levels in place, as it should: put them back
        sys.unraisablehook, threading.excepthook, sys.excepthook = saved
        absl_logging.set_verbosity(verbosity)
        logging.getLogger("asyncio").setLevel(aio)
