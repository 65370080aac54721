"""JAX's persistent compilation cache, turned on by each entry point from config.compilation_cache."""

import os

ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE")


def configure_compilation_cache(config) -> str | None:
    """Turn on JAX's persistent compilation cache in config.compilation_cache ("off": leave it off), so that a
    program compiled once on this machine (the train step, the bound, the sampler) is read back by every later
    process or train() call that builds the same program. Called by each entry point (main.py, the notebook, the
    benchmarks), never at import: a library must not change JAX's settings for its importer. An environment that
    names a cache already (JAX_COMPILATION_CACHE_DIR, or JAX_ENABLE_COMPILATION_CACHE=false: the tests, the
    benchmarks' --compilation_cache) wins. Returns the folder in use, or None. Cached programs are XLA's own
    executables of the same program: the numbers are the same bits."""
    import jax

    if any(os.environ.get(k) for k in ENV):
        return jax.config.jax_compilation_cache_dir if jax.config.jax_enable_compilation_cache else None
    if config.compilation_cache == "off":
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    where = os.path.abspath(os.path.expanduser(config.compilation_cache))
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", where)
    return where
