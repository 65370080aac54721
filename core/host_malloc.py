"""glibc's malloc settings for XLA's CPU buffers, set by each entry point from config.host_malloc.

XLA's CPU runtime allocates a step's temporary buffers with malloc and frees them when the step ends. glibc serves a
request above its mmap threshold (dynamic, at most 32 MiB by default) with a fresh mmap, gives memory at the top of
the heap back to the kernel beyond its trim threshold, and serves a thread other than the main one from an arena of
64 MiB heaps, too small for a large buffer, which then is always a fresh mmap (the text config's train step asks for
359 MB once a step from XLA's threads). Either way the next step's buffers are new pages, which the kernel must map
and zero at first touch: on this project's CPU runs up to 40% of the process's time went to the kernel (the text
config's evaluation, 10.2 of its 27.6 s).

"reuse" (the default) sets M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to 1 GiB and M_ARENA_MAX to 1 with mallopt(3),
which takes effect for every later allocation of the process: every thread allocates from the main heap, and freed
buffers stay there for the next step. The cost is one lock for every thread's allocations, which XLA's few large
ones per step do not feel; a host whose many threads allocate small blocks at once may, and there "glibc" leaves
glibc's defaults. Measured (docs/benchmarks/compile.md#host-memory-glibcs-malloc-settings,
`benchmarks/host_malloc.py`): the same numbers in 12% (DDPM) to 40% (the text evaluation) less time, peak memory
from 11% less to 18% more. Nothing changes where libc is not glibc (macOS, musl) or where the environment sets
glibc's own tunables (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_ARENA_MAX: the user's choice wins).

M_ARENA_MAX cannot undo arenas that exist already. In a process whose other threads allocated first (a Jupyter or
Colab kernel: its heartbeat, IOPub and control threads) each of them has its own arena; glibc hands those out in
turn to later threads (and once more than 8 exist it has fixed its own limit, 8 per core, and goes on making new
ones), so most of XLA's threads allocate off the main heap, where a large buffer is mapped afresh each step: the text
config's train step ran 1.5x as slow in a kernel as in a plain process (`benchmarks/kernel_malloc.py`).
keep_freed_memory counts the arenas (malloc_info(3)) and says so; only the environment, set before the process
starts, helps there (ADVICE).
"""

import ctypes
import ctypes.util
import os

THRESHOLD = 1 << 30
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h
ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")
CHOICES = ("reuse", "glibc")

_state = {"set": "", "advice": ""}  # the words of what was set; ADVICE where it fell short
ADVICE = (
    "start the process (jupyter) with MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=1073741824 "
    "MALLOC_TRIM_THRESHOLD_=1073741824 for main.py's speed (docs/config.md#host-memory)"
)


def _glibc():
    """glibc's handle, or None where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):
        return None
    return libc


def arenas(libc) -> int:
    """How many malloc arenas the process has (the heaps malloc_info(3) lists); 0 where it cannot tell."""
    try:
        libc.open_memstream.restype = ctypes.c_void_p
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
    except AttributeError:
        return 0
    if not stream.value:
        return 0
    try:
        libc.malloc_info(0, stream)
    except AttributeError:
        return 0
    finally:
        libc.fclose(stream)  # the buffer is complete (and ours to free) once the stream is closed
        xml = ctypes.string_at(buf.value, size.value) if buf.value else b""
        libc.free(buf)
    return xml.count(b"<heap nr=")


def keep_freed_memory(threshold: int = THRESHOLD) -> str:
    """Raise glibc's mmap and trim thresholds to `threshold` bytes and keep one arena (module docstring). Returns
    what now holds, in words: the settings made (or already made by this process), the environment's, or why
    nothing changed."""
    named = [k for k in ENV if os.environ.get(k)]
    if named:
        return f"glibc's malloc as the environment sets it ({', '.join(named)})"
    if _state["set"]:
        return _state["set"] + _state["advice"]
    libc = _glibc()
    if libc is None:
        return "the C library's own malloc (not glibc)"
    before = arenas(libc)  # more than one: later threads share those (module docstring); 0: cannot tell
    settings = ((M_MMAP_THRESHOLD, threshold), (M_TRIM_THRESHOLD, threshold), (M_ARENA_MAX, 1))
    accepted = [libc.mallopt(option, value) for option, value in settings]  # every one tried
    if not all(accepted):
        return "glibc's malloc, partly its defaults (mallopt refused a setting)"
    if before > 1:
        _state["set"] = (
            f"glibc malloc: mmap and trim thresholds {threshold >> 20} MiB, but {before} arenas already (threads "
            "that allocated before this call have their own, which later threads share: most of XLA's threads "
            "map their large buffers afresh)"
        )
        _state["advice"] = f"; {ADVICE}"
        return _state["set"] + _state["advice"]
    arena = "one arena" if before == 1 else "one arena asked (how many exist, malloc_info could not say)"
    _state["set"] = f"glibc malloc: mmap and trim thresholds {threshold >> 20} MiB, {arena}"
    return _state["set"]


def configure_host_malloc(config) -> str:
    """config.host_malloc: "reuse" keeps freed memory for reuse (keep_freed_memory), "glibc" leaves the defaults.
    Called by each entry point (main.py, the notebook, the benchmarks that train in-process), never at import.
    Returns what holds, in words."""
    if config.get("host_malloc", "reuse") == "glibc":
        return _state["set"] or "glibc's malloc defaults"
    return keep_freed_memory()


def current() -> str:
    """What this process has set ('' when nothing), for the records' fingerprints."""
    named = [f"{k}={os.environ[k]}" for k in ENV if os.environ.get(k)]
    return " ".join(named) or _state["set"]
