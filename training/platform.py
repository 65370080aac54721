"""Host set-up that must happen before JAX initialises its backends."""

import os

FLAG = "--xla_force_host_platform_device_count"


def cpu_device_count(requested: int, batch_size: int, cores: int) -> int:
    """-1: the largest n <= cores that divides batch_size; else `requested`."""
    if requested != -1:
        return requested
    return max(n for n in range(1, max(cores, 1) + 1) if batch_size % n == 0)


def configure_cpu_devices(config) -> int:
    """Split the CPU into per-core XLA devices unless XLA_FLAGS already says how many. Returns the count set (0 if
    left alone). Only the CPU platform is affected: on a GPU or TPU host JAX still uses the accelerators."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG in flags:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = cpu_device_count(config.mesh.cpu_devices, config.train.batch_size, cores)
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()
    return n


def prepare_host(config) -> list:
    """What every process that trains or evaluates does first, before JAX starts its backends, from its config: one
    XLA device per CPU core (configure_cpu_devices), JAX's compilation cache (config.compilation_cache,
    core/compilation_cache.py) and glibc's malloc settings (config.host_malloc, core/host_malloc.py). Called by
    main.py, the notebooks and the benchmarks that train in-process (benchmarks/throughput.py sets the devices
    alone, its figures measured so), never at import; evaluation/reference.py, which makes no devices, sets the
    other two itself. Returns what now holds, one line each, for a notebook to print."""
    from core.compilation_cache import configure_compilation_cache
    from core.host_malloc import configure_host_malloc

    n = configure_cpu_devices(config)
    devices = f"XLA CPU devices: {n} (config.mesh.cpu_devices)" if n else "XLA CPU devices: as XLA_FLAGS sets them"
    return [devices, f"compilation cache: {configure_compilation_cache(config)}", configure_host_malloc(config)]
