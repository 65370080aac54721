"""Short content hashes that say what a record was measured with, so that two records can be compared only when they
were measured alike: the data a run read, the network whose features FID uses, the code, the library versions and
the processor (XLA's CPU code differs between processors, and with it the last bits of every number).

A hash is of contents, never of a path: the same arrays give the same hash on every machine, and a path means
nothing on the next one. UNKNOWN stands where a content cannot be hashed (a dataset read record by record, code
outside git).
"""

import hashlib
import json
import os
import platform
import subprocess

import numpy as np

from core import host_malloc

UNKNOWN = "unknown"
DIGITS = 16  # hex digits kept: 64 bits, no collision among the records of a project
ROWS_PER_UPDATE = 4096  # rows of a large (memory-mapped) array hashed at a time: the hash is the same, memory small


def of_arrays(*arrays) -> str:
    """The hash of arrays' dtypes, shapes and values (row-major bytes), in order."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape};".encode())
        if a.ndim == 0:
            h.update(a.tobytes())
            continue
        for i in range(0, len(a), ROWS_PER_UPDATE):
            h.update(np.ascontiguousarray(a[i : i + ROWS_PER_UPDATE]).tobytes())
    return h.hexdigest()[:DIGITS]


def of_file(path: str) -> str:
    """The hash of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:DIGITS]


def of_fields(fields: dict) -> str:
    """The hash of a JSON-able dict's contents (keys in sorted order: the same fields give the same hash)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:DIGITS]


def code_revision(root: str) -> str:
    """The git commit of the code in `root`, '+modified' when tracked files differ from it; UNKNOWN without git."""
    try:
        run = lambda *a: subprocess.run(["git", "-C", root, *a], capture_output=True, text=True, timeout=30)
        head = run("rev-parse", "HEAD")
        if head.returncode:
            return UNKNOWN
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return head.stdout.strip()[:12] + ("+modified" if dirty.returncode or dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN


def versions() -> dict:
    """The versions of the libraries whose code computes the numbers."""
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "flax", "optax", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = UNKNOWN
    return out


def processor() -> str:
    """The processor's model name (/proc/cpuinfo on Linux; the platform's own answer elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or UNKNOWN


def without_paths(text: str) -> str:
    """`text` with every absolute or home-relative path replaced by <path> (a record names no path of the machine
    that wrote it: --xla_dump_to=/home/..., an exception's file name)."""
    import re

    quoted = re.sub(r"""(['"])(?:~|/)[^'"\n]*\1""", r"\1<path>\1", text)  # a quoted path may hold spaces
    return re.sub(r"(?<![\w.:/<~])(?:~/|/)(?!/)[^\s'\",:;)]+", "<path>", quoted)  # not a URL's //, not 1/2


def environment(root: str) -> dict:
    """What ran a computation: code revision, library versions, processor, platform and the XLA flags."""
    return dict(code=code_revision(root), **machine())


def machine() -> dict:
    """environment() less the code revision (no git call): library versions, processor, platform, XLA flags and
    the host's malloc setting."""
    return dict(
        versions=versions(),
        processor=processor(),
        platform=f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        xla_flags=without_paths(os.environ.get("XLA_FLAGS", "")),
        malloc=host_malloc.current(),  # its time, not its numbers, depends on it (core/host_malloc.py)
    )
