"""Step time, images/s, compile time and peak memory of the uniform and the adaptive train step, their ratio, and on
a GPU or TPU the model FLOPs utilisation, on whatever devices JAX sees.

    python benchmarks/throughput.py                       # default (digits) and CIFAR-10 configs, batch 128
    python benchmarks/throughput.py --configs=default --reps=30
    python benchmarks/throughput.py --configs=mnist_latent:dit,mnist_latent:uvit --batch=64   # latent transformers
                                      # (after python -m data.encode_latents --dataset=mnist --output=latents/mnist)
    python benchmarks/throughput.py --configs=cifar10 --set model.dtype=bfloat16   # on an accelerator

The adaptive step does its policy update on steps with step % f_S == 0. Both kinds of step are timed separately
(the train state's step counter is set to land on each kind) and amortised over f_S:
    amortised = ((f_S - 1) * t_other + t_update) / f_S,   ratio = amortised / t_uniform.
Timings are medians over interleaved repetitions, so load on the machine hits every variant alike. Compile time is
lower() + compile() of the jitted, sharded step. On a CPU-only host the CPU is split into per-core devices as
main.py does.
Peak memory per device: XLA's estimate for the compiled step (arguments + outputs - donated aliases + temporaries),
and where the runtime reports it (GPU, TPU) the measured peak_bytes_in_use after the timed steps.
The adaptive sampler's two kinds of step are the two programs the training loop runs (Setup.step_for): one for its
policy-update steps, one for the others (no cond, no update).
MFU (uniform step only) =
XLA's FLOPs per step per device / step time / the device's peak dense FLOP/s, from the vendors' datasheets in
PEAK_TFLOPS (bfloat16 for model.dtype=bfloat16, else the TF32 tensor-core rate that XLA uses for float32 matmuls on
NVIDIA GPUs by default). Devices not in the table get no MFU.
"""

import argparse
import importlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Peak dense TFLOP/s per device: (bfloat16, float32 as XLA runs it by default). NVIDIA datasheets (SXM parts; TF32
# without sparsity) and Google Cloud TPU documentation.
PEAK_TFLOPS = {
    "H200": (989.0, 494.0),
    "H100": (989.0, 494.0),
    "A100": (312.0, 156.0),
    "L4": (121.0, 60.0),
    "TPU v4": (275.0, 275.0),
    "TPU v5 lite": (197.0, 197.0),
    "TPU v5e": (197.0, 197.0),
    "TPU v5p": (459.0, 459.0),
    "TPU v6": (918.0, 918.0),
}


def peak_flops(device_kind: str, dtype: str):
    for name, (bf16, f32) in PEAK_TFLOPS.items():
        if name.lower() in device_kind.lower():
            return 1e12 * (bf16 if dtype == "bfloat16" else f32)
    return None


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default="default,cifar10", help="comma-separated modules under configs/")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--reps", type=int, default=15, help="timed steps of each kind (interleaved)")
    p.add_argument("--set", action="append", default=[], help="extra override FIELD=VALUE (python literal)")
    return p.parse_args()


def load(name, batch, overrides, sampler):
    import ast

    from config.fields import override

    name, _, arg = name.partition(":")  # a config's argument: mnist_latent:dit
    module = importlib.import_module(f"configs.{name}")
    c = module.get_config(arg) if arg else module.get_config()
    c.train.batch_size = batch
    c.sampler.name = sampler
    values = {}
    for kv in overrides:
        k, v = kv.split("=", 1)
        try:
            values[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            values[k] = v
    return override(c, values)


def main():
    args = parse()
    from training.platform import configure_cpu_devices

    configure_cpu_devices(load(args.configs.split(",")[0], args.batch, args.set, "uniform"))
    import jax

    from training import aot
    from training.setup import build, initial_state

    dev = jax.devices()
    print(f"# devices: {len(dev)} x {dev[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    rows = []
    for name in args.configs.split(","):
        variants = {}
        for sampler in ("uniform", "adaptive"):
            c = load(name, args.batch, args.set, sampler)
            s = build(c)
            st = initial_state(s)
            batch = s.example_batch(c.train.batch_size)
            f = c.sampler.adaptive.update_every
            kinds = {"other": 1} if sampler == "uniform" else {"other": 1, "update": 0}
            # the programs the training loop runs (Setup.step_for): for the learned sampler one for its
            # policy-update steps and one for the others
            compiled = {k: aot.compile_step(s, step) for k, step in kinds.items()}
            compile_s = sum(t for _, t in compiled.values())
            report = aot.step_report(s, *compiled["other"])
            variants[sampler] = dict(
                compiled={k: fn for k, (fn, _) in compiled.items()},
                state=st,
                batch=batch,
                compile_s=compile_s,
                f=f,
                kinds=kinds,
                times={k: [] for k in kinds},
                report=report,
                dtype=c.model.dtype,
            )
            for k, step in kinds.items():  # warm-up call of each kind
                st = variants[sampler]["state"].replace(step=jax.numpy.asarray(step + f, jax.numpy.int32))
                st, m = variants[sampler]["compiled"][k](st, batch)
                jax.block_until_ready(m)
                variants[sampler]["state"] = st
        for _ in range(args.reps):
            for v in variants.values():
                for k, step in v["kinds"].items():
                    st = v["state"].replace(step=jax.numpy.asarray(step + 2 * v["f"], jax.numpy.int32))
                    t0 = time.perf_counter()
                    st, m = v["compiled"][k](st, v["batch"])
                    jax.block_until_ready((st, m))
                    v["times"][k].append(time.perf_counter() - t0)
                    v["state"] = st
        u = statistics.median(variants["uniform"]["times"]["other"])
        a = variants["adaptive"]
        t_other, t_upd = statistics.median(a["times"]["other"]), statistics.median(a["times"]["update"])
        amort = ((a["f"] - 1) * t_other + t_upd) / a["f"]
        measured = (dev[0].memory_stats() or {}).get("peak_bytes_in_use")
        ur = variants["uniform"]["report"]
        peak = peak_flops(dev[0].device_kind, variants["uniform"]["dtype"])
        mfu = ur["flops"] / u / peak if peak and ur["flops"] else None
        rows.append(
            dict(
                name=name,
                u=u,
                other=t_other,
                upd=t_upd,
                amort=amort,
                f=a["f"],
                cu=variants["uniform"]["compile_s"],
                ca=a["compile_s"],
                mem_u=aot.peak_bytes(ur),
                mem_a=aot.peak_bytes(a["report"]),
                measured=measured,
                gflop=(ur["flops"] or 0) / 1e9,
                mfu=mfu,
            )
        )
        print(
            f"{name}: uniform {u * 1e3:.1f} ms/step ({args.batch / u:.0f} img/s); adaptive other "
            f"{t_other * 1e3:.1f} ms, update {t_upd * 1e3:.1f} ms, amortised over f_S={a['f']}: {amort * 1e3:.1f} ms "
            f"({args.batch / amort:.0f} img/s); ratio {amort / u:.3f}; compile uniform {rows[-1]['cu']:.1f} s, "
            f"adaptive {a['compile_s']:.1f} s; peak memory per device (XLA estimate) uniform "
            f"{mib(rows[-1]['mem_u'])}, adaptive {mib(rows[-1]['mem_a'])}, measured {mib(measured)}; "
            f"{rows[-1]['gflop']:.2f} GFLOP per uniform step per device; MFU {pct(mfu)}",
            flush=True,
        )
    print(
        "\n| config | uniform ms/step (img/s) | adaptive other / update ms | adaptive amortised ms (img/s) | ratio "
        "| compile uniform / adaptive | peak memory per device, XLA est. uniform / adaptive (measured) "
        "| GFLOP per step per device | MFU (uniform) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['u'] * 1e3:.1f} ({args.batch / r['u']:.0f}) | {r['other'] * 1e3:.1f} / "
            f"{r['upd'] * 1e3:.1f} | {r['amort'] * 1e3:.1f} ({args.batch / r['amort']:.0f}), f_S={r['f']} | "
            f"{r['amort'] / r['u']:.3f}x | {r['cu']:.1f} s / {r['ca']:.1f} s | {mib(r['mem_u'])} / "
            f"{mib(r['mem_a'])} ({mib(r['measured'])}) | {r['gflop']:.2f} | {pct(r['mfu'])} |"
        )


def mib(b):
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


if __name__ == "__main__":
    main()
