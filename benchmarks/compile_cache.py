"""What JAX's persistent compilation cache (config.compilation_cache) saves a user: the seconds spent compiling in a
first run, a resumed run, an evaluation after training and the notebook's chunks, and that the numbers are the same
bits with and without it.

    taskset -c 0 python benchmarks/compile_cache.py --out=/tmp/compile_cache [--steps=100] [--set FIELD=VALUE ...]

Every phase is a fresh process (as a user's commands are) on configs/default.py with --steps training steps and the
--set overrides, in order:

1. train, a new cache folder (OUT/cache): the first compile;
2. eval (--mode=eval) of that run: its programs' first compile;
3. train again to 2 x --steps: the resumed run;
4. eval again: the second evaluation;
5. the notebook's three chunks, each a train() call in one process, with another new cache folder (OUT/cache_nb);
6. train a new workdir with the warm cache, and 7. one with the cache off: their metrics.jsonl must be equal but for
   the clocks (steps_per_sec, train_seconds, periodic/seconds), and equal to run 1's.

"Compiling" is JAX's backend compile time (/jax/core/compile/backend_compile_duration: a cache hit's read counts
there too), summed over every program the phase compiles; hits and misses are the cache's own counts. Results:
docs/benchmarks/compile.md#the-compilation-cache.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CLOCKS = ("steps_per_sec", "train_seconds", "periodic/seconds")


def child(spec: dict):
    """One phase in this process: train (in spec['chunks'] train() calls) or evaluate; prints one RESULT line per
    call."""
    from benchmarks.samplers import load_config
    from core import fingerprint
    from training.platform import prepare_host

    config = load_config("configs/default.py", [*spec["sets"], f"compilation_cache={spec['cache']}"])
    prepare_host(config)
    import jax

    counts = dict(compile_s=0.0, hits=0, misses=0)
    by_program = {}

    def on_duration(event, duration, fun_name="?", **_):
        if event == "/jax/core/compile/backend_compile_duration":
            counts["compile_s"] += duration
            by_program[fun_name] = by_program.get(fun_name, 0.0) + duration

    def on_event(event, **_):
        if event in ("/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"):
            counts["hits" if event.endswith("hits") else "misses"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    import main

    for k in range(1, spec["chunks"] + 1):
        counts.update(compile_s=0.0, hits=0, misses=0)
        by_program.clear()
        config.train.num_steps = spec["steps"] * k // spec["chunks"]
        t0 = time.perf_counter()
        rc = main.run(config, spec["workdir"], spec["mode"])
        top = dict(sorted(by_program.items(), key=lambda kv: -kv[1])[:6])
        row = dict(counts, rc=rc, wall_s=time.perf_counter() - t0, programs=len(by_program), slowest=top)
        print("RESULT " + json.dumps(row), flush=True)
        with open(os.path.join(os.path.dirname(spec["workdir"]), "phases.jsonl"), "a") as f:
            where = dict(workdir=os.path.basename(spec["workdir"]), mode=spec["mode"], chunk=k)  # no machine's path
            f.write(json.dumps(dict(row, **where, environment=fingerprint.environment(ROOT))) + "\n")


def phase(name, mode, workdir, steps, cache, sets, chunks=1):
    """Run one phase in a fresh process; its RESULT records, each with the phase's name."""
    spec = dict(mode=mode, workdir=workdir, steps=steps, cache=cache, sets=sets, chunks=chunks)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") or "CACHE" not in k}  # the config decides
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"error: phase {name}: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    rows = [json.loads(line[len("RESULT ") :]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    for i, row in enumerate(rows):
        row["phase"] = name if len(rows) == 1 else f"{name}, chunk {i + 1}"
        print(
            f"{row['phase']}: compiling {row['compile_s']:.1f} s ({row['hits']} hits, {row['misses']} misses), "
            f"{row['wall_s']:.1f} s in all",
            flush=True,
        )
    return rows


def metrics_without_clocks(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if k not in CLOCKS} for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="a folder for the workdirs and caches (emptied first)")
    ap.add_argument("--steps", type=int, default=100, help="training steps of the first run (default 100)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a config override (repeatable)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if not args.out:
        ap.error("--out is required")
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    o = lambda *p: os.path.join(args.out, *p)
    sets = [f"train.log_every={max(args.steps // 10, 1)}", *args.set]
    n = args.steps
    rows = phase("first run", "train", o("run"), n, o("cache"), sets)
    rows += phase("eval after training", "eval", o("run"), n, o("cache"), sets)
    rows += phase("resumed run", "train", o("run"), 2 * n, o("cache"), sets)
    rows += phase("second eval", "eval", o("run"), 2 * n, o("cache"), sets)
    nb = [*sets, f"train.ckpt_every={max(n // 3, 1)}"]
    rows += phase("notebook", "train", o("notebook"), n, o("cache_nb"), nb, chunks=3)
    rows += phase("new run, warm cache", "train", o("warm"), n, o("cache"), sets)
    rows += phase("new run, cache off", "train", o("off"), n, "off", sets)
    warm, off = metrics_without_clocks(o("warm")), metrics_without_clocks(o("off"))
    first = [r for r in metrics_without_clocks(o("run")) if r["step"] <= n]
    same = warm == off == first
    print(
        f"metrics.jsonl without the clocks: warm cache {'==' if warm == off else '!='} cache off "
        f"{'==' if off == first else '!='} the first run ({len(off)} records)",
        flush=True,
    )
    print("\n| phase | compiling (s) | cache hits / misses | wall (s) |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['phase']} | {r['compile_s']:.1f} | {r['hits']} / {r['misses']} | {r['wall_s']:.1f} |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
