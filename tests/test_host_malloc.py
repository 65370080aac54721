"""glibc's malloc settings (core/host_malloc.py, config.host_malloc), read from glibc's own accounting
(mallinfo2): with "reuse" a 64 MiB block, the main thread's or another's, comes from the heap and stays there when
freed, ready for the next allocation; with glibc's defaults, and where the environment sets glibc's own tunables, it
is a separate mapping (above glibc's largest dynamic mmap threshold, 32 MiB) that is unmapped when freed."""

import json
import os
import subprocess
import sys

import pytest

from core.host_malloc import _glibc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB64 = 64 << 20

PROBE = """
import ctypes, json, sys, threading
sys.path.insert(0, {root!r})
from config.schema import default_config
from core.host_malloc import _glibc, configure_host_malloc

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

if {early_thread!r}:  # as a notebook kernel's threads: one allocates before the settings are made
    early = threading.Thread(target=lambda: [bytearray(4096) for _ in range(100)])
    early.start()
    early.join()
c = default_config()
c.host_malloc = {choice!r}
said = configure_host_malloc(c)
libc = _glibc()
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
block = libc.malloc({size})
held = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
in_thread = {{}}

def other_thread():  # as XLA's threads allocate: a thread's own arena holds heaps of at most 64 MiB
    b = libc.malloc({size})
    in_thread["mapped"] = libc.mallinfo2().hblkhd
    libc.free(b)

t = threading.Thread(target=other_thread)
t.start()
t.join()
print(json.dumps(dict(said=said, mapped_held=held.hblkhd, heap_held=held.uordblks, heap_free_after=freed.fordblks,
                      thread_mapped_held=in_thread["mapped"])))
"""

pytestmark = pytest.mark.skipif(_glibc() is None or not hasattr(_glibc(), "mallinfo2"), reason="glibc >= 2.33 only")


def probe(choice: str, early_thread: bool = False, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=ROOT, choice=choice, size=MIB64, early_thread=early_thread)],
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_reuse_serves_a_large_block_from_the_heap_and_keeps_it_when_freed():
    got = probe("reuse")
    assert got["said"] == "glibc malloc: mmap and trim thresholds 1024 MiB, one arena"
    assert got["mapped_held"] < MIB64 <= got["heap_held"], got
    assert got["heap_free_after"] >= MIB64, got  # not given back: the next step's buffers reuse it
    assert got["thread_mapped_held"] < MIB64, got  # one arena: another thread's block from the same heap


def test_glibc_defaults_map_a_large_block_and_unmap_it_when_freed():
    got = probe("glibc")
    assert got["said"] == "glibc's malloc defaults"
    assert got["mapped_held"] >= MIB64 > got["heap_held"], got
    assert got["heap_free_after"] < MIB64, got
    assert got["thread_mapped_held"] >= MIB64, got


def test_the_environments_tunables_win():
    got = probe("reuse", MALLOC_MMAP_THRESHOLD_=str(32 << 20))
    assert got["said"] == "glibc's malloc as the environment sets it (MALLOC_MMAP_THRESHOLD_)"
    assert got["mapped_held"] >= MIB64, got  # glibc's own 32 MiB holds


def test_a_thread_that_allocated_first_is_said_to_defeat_the_one_arena():
    """glibc fixes its arena limit when a second thread first allocates: after that, M_ARENA_MAX is ignored and a
    thread's large block is mapped afresh (as in a notebook kernel); the settings say so and how to do better."""
    got = probe("reuse", early_thread=True)
    assert got["said"].startswith("glibc malloc: mmap and trim thresholds 1024 MiB, but 2 arenas already"), got
    assert "MALLOC_ARENA_MAX=1" in got["said"], got
    assert got["thread_mapped_held"] >= MIB64, got  # what the words warn of
    assert got["mapped_held"] < MIB64 <= got["heap_held"], got  # the main thread's thresholds still hold
    advice = dict(MALLOC_ARENA_MAX="1", MALLOC_MMAP_THRESHOLD_=str(1 << 30), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
    assert probe("reuse", early_thread=True, **advice)["thread_mapped_held"] < MIB64  # the advice works
