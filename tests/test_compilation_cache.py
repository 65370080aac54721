"""The persistent compilation cache that every entry point turns on (core/compilation_cache.py): in the folder
config.compilation_cache names, off with "off", and the environment's own setting first."""

import os
import subprocess
import sys

from conftest import ROOT

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from configs.default import get_config
from core.compilation_cache import configure_compilation_cache
c = get_config()
c.compilation_cache = sys.argv[2]
print(configure_compilation_cache(c))
import jax, jax.numpy as jnp
print(float(jax.jit(lambda x: (x * 2 + 1).sum())(jnp.ones(3))))
"""


def child(field, **env):
    """(stdout lines, the child's environment) of a fresh JAX process that sets config.compilation_cache=`field`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_ENABLE_COMP"))}
    base["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # this small program too (JAX's default: 1 s or more)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, ROOT, field], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


def test_the_config_names_the_cache_off_turns_it_off_and_the_environment_wins(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    assert child(str(mine)) == [str(mine), "9.0"] and any(mine.iterdir())
    assert child("off") == ["None", "9.0"]
    # the tests' and the benchmarks' environment names a folder: it is used, the field is not
    assert child(str(tmp_path / "ignored"), JAX_COMPILATION_CACHE_DIR=str(theirs)) == [str(theirs), "9.0"]
    assert any(theirs.iterdir()) and not (tmp_path / "ignored").exists()
    assert child(str(tmp_path / "ignored"), JAX_ENABLE_COMPILATION_CACHE="false") == ["None", "9.0"]
    assert not (tmp_path / "ignored").exists()


def test_prepare_host_sets_the_devices_the_cache_and_malloc_before_jax_starts(tmp_path):
    """training.platform.prepare_host, what main.py, the notebooks and the benchmarks call first: XLA's CPU device
    count from config.mesh.cpu_devices (JAX then has that many), the compilation cache in the config's folder, and
    glibc's malloc settings; one line each says what holds."""
    code = """
import sys
sys.path.insert(0, sys.argv[1])
from configs.default import get_config
from training.platform import prepare_host
c = get_config()
c.compilation_cache, c.mesh.cpu_devices = sys.argv[2], 3
print("|".join(prepare_host(c)))
import jax
print(len(jax.devices()))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_ENABLE_COMP"))}
    env = {k: v for k, v in env.items() if k != "XLA_FLAGS" and not k.startswith("MALLOC_")}
    cache = tmp_path / "cache"
    r = subprocess.run(
        [sys.executable, "-c", code, ROOT, str(cache)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines, devices = r.stdout.split("\n")[:2]
    said = lines.split("|")
    assert said[:2] == ["XLA CPU devices: 3 (config.mesh.cpu_devices)", f"compilation cache: {cache}"]
    assert devices == "3"
    # a plain process: no thread has allocated before it, so one arena holds (a regression that started threads
    # first, e.g. an import, would say "but N arenas already")
    assert said[2] in (
        "glibc malloc: mmap and trim thresholds 1024 MiB, one arena",
        "the C library's own malloc (not glibc)",
    )
