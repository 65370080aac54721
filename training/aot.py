"""Ahead-of-time compilation of the train step for the configured mesh: what it will cost before a run starts.

    python main.py --mode=compile --config=configs/cifar10.py

lowers and compiles the sharded step from abstract shapes only (no parameters are initialised, no data is read) and
reports XLA's per-device memory (arguments, outputs, temporaries; donated state aliased to the output) and its
FLOP estimate for one step. On a TPU pod slice run it on every host, as training would be. Training checks the same
memory analysis against the memory there is before its first step (memory_problem).
"""

import time

import jax
import numpy as np

from training import checkpoint as ckpt


def compile_step(setup, step=None):
    """(compiled step, seconds to lower and compile): the program the loop runs at step `step` (Setup.step_for),
    or with step None the one that decides the sampler's periodic update on the device (both branches)."""
    c = setup.config
    state = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
    batch = setup.abstract_batch(c.train.batch_size)
    fn = setup.step_for(step)
    t0 = time.perf_counter()
    compiled = fn.lower(state, batch).compile()
    return compiled, time.perf_counter() - t0


def state_bytes_per_device(setup) -> int:
    """Bytes of the train state on one device (its shard of each array): already resident when the step runs."""
    abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
    return sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize for x in jax.tree.leaves(abstract))


def available_memory():
    """(bytes one device can still allocate, where the figure comes from), or (None, why not): on CPU the host's
    MemAvailable shared by its local devices, on an accelerator its allocator's limit less what is in use."""
    devices = jax.local_devices()
    if devices[0].platform == "cpu":
        try:
            with open("/proc/meminfo") as f:
                kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return None, "no /proc/meminfo"
        return kib * 1024 // len(devices), f"/proc/meminfo MemAvailable over {len(devices)} cpu device(s)"
    stats = [d.memory_stats() for d in devices]
    if not all(s and "bytes_limit" in s for s in stats):
        return None, "the device reports no memory stats"
    free = min(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)
    return free, f"{devices[0].platform} device memory: limit less in use"


def memory_problem(setup, compiled, available=None, source="") -> str | None:
    """One line if the compiled step needs more memory on a device than it has (`available` bytes; default: this
    machine's, available_memory), else None: the step's peak from XLA's memory analysis (arguments + outputs -
    donated aliases + temporaries) less the train state, which is already there."""
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    if available is None:
        available, source = available_memory()
        if available is None:
            return None
    r = dict(argument_bytes=mem.argument_size_in_bytes, output_bytes=mem.output_size_in_bytes)
    r.update(alias_bytes=mem.alias_size_in_bytes, temp_bytes=mem.temp_size_in_bytes)
    need = peak_bytes(r) - state_bytes_per_device(setup)
    if need <= available:
        return None
    c, gib = setup.config, lambda b: f"{b / 2**30:.1f} GiB"
    n_params = sum(x.size for x in jax.tree.leaves(setup.abstract_state.params))
    return (
        f"config.train.batch_size={c.train.batch_size!r} is too large for this machine with this model "
        f"({n_params:,} parameters): the train step needs {gib(need)} per device besides its state (XLA's memory "
        f"analysis of the compiled step), {gib(available)} is available ({source}); use a smaller batch, or more "
        "devices (docs/scale.md)"
    )


def check_memory(setup, compiled):
    """Raise ConfigError (one line, memory_problem's) if the compiled step does not fit this machine; with several
    processes, if it does not fit any of them (each checks its own host's memory), on every process."""
    from config.validate import ConfigError

    problem = memory_problem(setup, compiled)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        bad = multihost_utils.process_allgather(np.int32(problem is not None))
        if np.any(bad) and problem is None:
            problem = "the train step does not fit another process's memory (its own error says how much)"
    if problem:
        raise ConfigError(problem)


def loop_programs(setup):
    """[(label, step)] of the programs the training loop runs: one, or for a sampler with a period (the learned
    sampler's policy update) the steps with and without it."""
    period = setup.sampler.period()
    if period is None:
        return [("every step", 0)]
    return [(f"steps with the sampler's periodic update (1 in {period})", 0), ("the other steps", 1)]


def compile_report(config) -> str:
    """--mode=compile: build and compile the config's step and report it. A latent config whose latents are not
    encoded yet is compiled for the latents it describes (data/latents.py planned_latents), and the report's first
    line says what was assumed."""
    from data.latents import planned_latents
    from training.setup import build

    with planned_latents(config) as (c, note):
        return (f"{note}\n" if note else "") + report_all(build(c))


def report_all(setup) -> str:
    """The compile report of every program the loop runs."""
    parts = []
    for label, step in loop_programs(setup):
        r = step_report(setup, *compile_step(setup, step))
        parts.append(format_report(r, label))
    return "\n".join(parts)


def step_report(setup, compiled, seconds) -> dict:
    """Per-device figures of a compiled step (XLA's estimates; None where the backend gives none)."""
    c = setup.config
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
    n_params = sum(x.size for x in jax.tree.leaves(setup.abstract_state.params))
    field = lambda name: int(getattr(mem, name)) if mem is not None else None
    return dict(
        devices=jax.device_count(),
        platform=jax.devices()[0].platform,
        mesh=dict(setup.mesh.shape),
        batch_size=c.train.batch_size,
        sampler=c.sampler.name,
        params=int(n_params),
        compile_s=round(seconds, 2),
        argument_bytes=field("argument_size_in_bytes"),
        output_bytes=field("output_size_in_bytes"),
        alias_bytes=field("alias_size_in_bytes"),
        temp_bytes=field("temp_size_in_bytes"),
        flops=float(cost["flops"]) if "flops" in cost else None,
        bytes_accessed=float(cost["bytes accessed"]) if "bytes accessed" in cost else None,
    )


def peak_bytes(r: dict):
    """Per-device peak estimate: arguments + outputs - donated aliases + temporaries (None if not reported)."""
    if r["argument_bytes"] is None:
        return None
    return r["argument_bytes"] + r["output_bytes"] - r["alias_bytes"] + r["temp_bytes"]


def format_report(r: dict, label: str = "every step") -> str:
    mib = lambda b: "n/a" if b is None else f"{b / 2**20:.1f} MiB"
    peak = peak_bytes(r)
    flops = "n/a" if r["flops"] is None else f"{r['flops'] / 1e9:.3f} GFLOP"
    return "\n".join(
        [
            f"train step ({label}): {r['sampler']} sampler, batch {r['batch_size']}, {r['params']:,} parameters, "
            f"{r['devices']} {r['platform']} device(s), mesh {r['mesh']}",
            f"compile: {r['compile_s']:.1f} s",
            f"memory per device: arguments {mib(r['argument_bytes'])}, outputs {mib(r['output_bytes'])} "
            f"(aliased with donated arguments {mib(r['alias_bytes'])}), temporaries {mib(r['temp_bytes'])}; "
            f"peak about {mib(peak)}",
            f"FLOPs per step per device (XLA estimate; a loop body, e.g. a chunked probe, counted once): {flops}",
        ]
    )
