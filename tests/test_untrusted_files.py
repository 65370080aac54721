"""Files from the internet (FID Inception weights, autoencoder .bin files) read by core/torch_file.py: a crafted file
whose pickle would run a command is refused in one line, in either format and at every pickle of the legacy stream,
and the command does not run; truncated, bit-flipped and random files are one line too, never a crash or a hang.
Real files, a real command, the reader in real subprocesses."""

import io
import json
import os
import pickle
import pickletools
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT

FIX = os.path.join(ROOT, "tests", "fixtures")
LEGACY, ZIP = os.path.join(FIX, "torch_file_legacy.pth"), os.path.join(FIX, "torch_file_zip.pth")


class RunsCommand:
    """Pickles as a call of os.system(cmd): what a malicious weights file holds."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return os.system, (self.cmd,)


def legacy_pickles(data: bytes) -> list:
    """The legacy stream's five pickles (magic number, protocol, system info, state dict, storage keys) as bytes,
    then the storages' bytes."""
    f, out = io.BytesIO(data), []
    for _ in range(5):
        start = f.tell()
        for _ in pickletools.genops(f):  # stops after the pickle's STOP
            pass
        out.append(data[start : f.tell()])
    return out + [data[f.tell() :]]


LEGACY_PICKLES = ("magic number", "protocol", "system info", "state dict", "storage keys")


def crafted(tmp_path, where: str) -> str:
    """A copy of a fixture file with one pickle replaced by one that runs `touch <tmp_path>/ran`."""
    evil = pickle.dumps(RunsCommand(f"touch {tmp_path}/ran"), protocol=2)
    path = str(tmp_path / "weights.pth")
    if where == "zip":
        with zipfile.ZipFile(ZIP) as src, zipfile.ZipFile(path, "w") as dst:
            for name in src.namelist():
                dst.writestr(name, evil if name.endswith("data.pkl") else src.read(name))
    else:
        parts = legacy_pickles(open(LEGACY, "rb").read())
        parts[LEGACY_PICKLES.index(where)] = evil
        open(path, "wb").write(b"".join(parts))
    return path


@pytest.mark.parametrize("where", ["zip", *LEGACY_PICKLES])
def test_a_weights_file_whose_pickle_would_run_a_command_is_refused_and_the_command_does_not_run(tmp_path, where):
    from core.torch_file import NotAStateDict, load_state_dict

    path = crafted(tmp_path, where)
    with pytest.raises(NotAStateDict) as e:
        load_state_dict(path)
    assert not os.path.exists(tmp_path / "ran"), f"the file's command ran ({where})"
    assert str(e.value) == (
        f"{path}: its pickle calls posix.system, which is not part of a state dict; refused, not run"
    ), str(e.value)


def test_encode_latents_refuses_an_autoencoder_that_would_run_a_command_in_one_line(tmp_path):
    """The command a user runs on a downloaded autoencoder: one line naming the flag and the file, exit status
    nonzero, the command not run, no output folder made."""
    ae = tmp_path / "ae"
    ae.mkdir()
    shutil.copy(os.path.join(FIX, "autoencoder_kl_tiny_legacy", "config.json"), ae / "config.json")
    shutil.move(crafted(tmp_path, "magic number"), ae / "diffusion_pytorch_model.bin")
    out = tmp_path / "latents"
    cmd = [sys.executable, "-m", "data.encode_latents", "--dataset=digits", f"--autoencoder={ae}", f"--output={out}"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and not os.path.exists(tmp_path / "ran")
    assert r.stderr.strip().splitlines() == [
        f"error: --autoencoder={ae}: {ae}/diffusion_pytorch_model.bin: its pickle calls posix.system, which is not "
        "part of a state dict; refused, not run"
    ], r.stderr[-3000:]
    assert not out.exists()


# Runs in a subprocess (a crash or a hang there fails the test, not the test session): every case either reads
# (a flipped bit inside the arrays' bytes changes a number; the legacy format has no checksum) or is refused with
# NotAStateDict in one line naming the file; anything else is reported.
FUZZ = r"""
import json, os, random, sys
sys.path.insert(0, sys.argv[1])
from core.torch_file import NotAStateDict, load_state_dict

folder, sources = sys.argv[2], sys.argv[3:]
rng = random.Random(0)
cases = []
for src in sources:
    data = open(src, "rb").read()
    for cut in sorted({0, 1, 2, 8, 15, 16, 21, len(data) - 1, *rng.sample(range(len(data)), 30)}):
        cases.append((f"{os.path.basename(src)} cut at {cut}", data[:cut]))
    for _ in range(80):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 8])):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        cases.append((f"{os.path.basename(src)} bits flipped", bytes(b)))
    for _ in range(20):
        b = bytearray(data)
        i = rng.randrange(len(b))
        b[i : i + 8] = rng.randbytes(8)
        cases.append((f"{os.path.basename(src)} 8 bytes at {i} random", bytes(b)))
for n in (0, 1, 7, 100, 5000):
    for head in (b"", b"PK\x03\x04", b"\x80\x02\x8a\x0a"):
        cases.append((f"random {n} bytes after {head!r}", head + rng.randbytes(n)))
out = {"read": 0, "refused": 0, "bad": []}
for i, (what, data) in enumerate(cases):
    path = os.path.join(folder, f"case{i}.pth")
    open(path, "wb").write(data)
    try:
        sd = load_state_dict(path)
        assert isinstance(sd, dict)
        out["read"] += 1
    except NotAStateDict as e:
        if "\n" in str(e) or not str(e).startswith(path + ": "):
            out["bad"].append(f"{what}: {str(e)!r}")
        out["refused"] += 1
    except BaseException as e:
        out["bad"].append(f"{what}: {type(e).__name__}: {e}")
    os.remove(path)
print(json.dumps(out))
"""


def test_truncated_bit_flipped_and_random_files_are_one_line_never_a_crash_or_a_hang(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", FUZZ, ROOT, str(tmp_path), LEGACY, ZIP], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, f"the reader crashed (status {r.returncode}): {r.stderr[-3000:]}"
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["bad"] == [], "\n".join(out["bad"][:20])
    assert out["refused"] > 200 and out["read"] > 10, out  # both outcomes seen: the cases reach both
