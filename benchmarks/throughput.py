"""Step time, images/s and compile time of the uniform and the adaptive train step, and their ratio.

    python benchmarks/throughput.py                       # default (digits) and CIFAR-10 configs, batch 128
    python benchmarks/throughput.py --configs=default --reps=30

The adaptive step does its policy update on steps with step % f_S == 0. Both kinds of step are timed separately
(the train state's step counter is set to land on each kind) and amortised over f_S:
    amortised = ((f_S - 1) * t_other + t_update) / f_S,   ratio = amortised / t_uniform.
Timings are medians over interleaved repetitions, so load on the machine hits every variant alike. Compile time is
lower() + compile() of the jitted, sharded step. On a CPU-only host the CPU is split into per-core devices as
main.py does.
"""
import argparse
import importlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default="default,cifar10", help="comma-separated modules under configs/")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--reps", type=int, default=15, help="timed steps of each kind (interleaved)")
    p.add_argument("--set", action="append", default=[], help="extra override FIELD=VALUE (python literal)")
    return p.parse_args()


def load(name, batch, overrides, sampler):
    import ast

    c = importlib.import_module(f"configs.{name}").get_config()
    c.train.batch_size = batch
    c.sampler.name = sampler
    for kv in overrides:
        k, v = kv.split("=", 1)
        node = c
        *path, last = k.split(".")
        for q in path:
            node = node[q]
        try:
            node[last] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            node[last] = v
    return c


def main():
    args = parse()
    from training.platform import configure_cpu_devices

    configure_cpu_devices(load(args.configs.split(",")[0], args.batch, args.set, "uniform"))
    import jax
    import numpy as np

    from training.train import build, initial_state

    dev = jax.devices()
    print(f"# devices: {len(dev)} x {dev[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    rows = []
    for name in args.configs.split(","):
        variants = {}
        for sampler in ("uniform", "adaptive"):
            c = load(name, args.batch, args.set, sampler)
            s = build(c)
            st = initial_state(s)
            shape = (c.train.batch_size, c.data.image_size, c.data.image_size, c.data.channels)
            batch = jax.device_put(np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8), s.batch_sharding)
            t0 = time.perf_counter()
            compiled = s.step_fn.lower(st, batch).compile()
            compile_s = time.perf_counter() - t0
            f = c.sampler.adaptive.update_every
            kinds = {"other": 1} if sampler == "uniform" else {"other": 1, "update": 0}
            variants[sampler] = dict(compiled=compiled, state=st, batch=batch, compile_s=compile_s, f=f,
                                     kinds=kinds, times={k: [] for k in kinds})
            for k, step in kinds.items():  # warm-up call of each kind
                st = variants[sampler]["state"].replace(step=jax.numpy.asarray(step + f, jax.numpy.int32))
                st, m = compiled(st, batch)
                jax.block_until_ready(m)
                variants[sampler]["state"] = st
        for _ in range(args.reps):
            for sampler, v in variants.items():
                for k, step in v["kinds"].items():
                    st = v["state"].replace(step=jax.numpy.asarray(step + 2 * v["f"], jax.numpy.int32))
                    t0 = time.perf_counter()
                    st, m = v["compiled"](st, v["batch"])
                    jax.block_until_ready((st, m))
                    v["times"][k].append(time.perf_counter() - t0)
                    v["state"] = st
        u = statistics.median(variants["uniform"]["times"]["other"])
        a = variants["adaptive"]
        t_other, t_upd = statistics.median(a["times"]["other"]), statistics.median(a["times"]["update"])
        amort = ((a["f"] - 1) * t_other + t_upd) / a["f"]
        rows.append((name, u, t_other, t_upd, amort, variants["uniform"]["compile_s"], a["compile_s"], a["f"]))
        print(f"{name}: uniform {u * 1e3:.1f} ms/step ({args.batch / u:.0f} img/s, {1 / u:.2f} steps/s); adaptive "
              f"other {t_other * 1e3:.1f} ms, update {t_upd * 1e3:.1f} ms, amortised over f_S={a['f']}: "
              f"{amort * 1e3:.1f} ms ({1 / amort:.2f} steps/s); ratio {amort / u:.3f}; compile uniform "
              f"{variants['uniform']['compile_s']:.1f} s, adaptive {a['compile_s']:.1f} s", flush=True)
    print("\n| config | uniform ms/step | adaptive other | adaptive update | amortised | ratio | compile uniform | compile adaptive |")
    print("|---|---|---|---|---|---|---|---|")
    for name, u, o, up, am, cu, ca, f in rows:
        print(f"| {name} | {u * 1e3:.1f} | {o * 1e3:.1f} | {up * 1e3:.1f} | {am * 1e3:.1f} (f_S={f}) | "
              f"{am / u:.3f}x | {cu:.1f} s | {ca:.1f} s |")


if __name__ == "__main__":
    main()
