"""Per-device FLOPs of the uniform and the learned sampler's train step as the data axis grows: the learned
sampler's extra work (probes and sweep) must shrink as 1/D, as the reference splits its sweep over its GPUs.

    python benchmarks/sweep_scaling.py --config=configs/cifar10.py --devices=1,2,8

Each device count is a fresh process of `main.py --mode=compile` on that many XLA CPU devices (nothing is trained or
allocated); FLOPs are XLA's cost analysis of the compiled step per device. The probes run unchunked here
(probe_chunk_rows=0): XLA counts a loop body once, not times its trip count (style.md). The adaptive figure is the
program of the policy-update steps (the first that --mode=compile reports), so "extra" is the policy update's work
(probes, sweep, policy) per device.
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flops(config, devices, sampler, sets):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    cmd = [
        sys.executable,
        os.path.join(ROOT, "main.py"),
        "--mode=compile",
        f"--config={config}",
        f"--config.sampler.name={sampler}",
        "--config.sampler.adaptive.probe_chunk_rows=0",
        f"--config.mesh.data={devices}",
    ] + [f"--config.{s}" for s in sets]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    m = re.search(r"FLOPs per step per device .*: ([\d.]+) GFLOP", r.stdout)
    if r.returncode or not m:
        sys.exit(f"error: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/cifar10.py")
    p.add_argument("--devices", default="1,2,8")
    p.add_argument("--set", action="append", default=[], help="extra override FIELD=VALUE")
    args = p.parse_args()
    print(f"`python benchmarks/sweep_scaling.py {' '.join(sys.argv[1:])}`\n")
    print("| devices | uniform GFLOP/device | adaptive GFLOP/device | extra GFLOP/device | extra x devices |")
    print("|---|---|---|---|---|")
    for d in map(int, args.devices.split(",")):
        u, a = flops(args.config, d, "uniform", args.set), flops(args.config, d, "adaptive", args.set)
        print(f"| {d} | {u:.2f} | {a:.2f} | {a - u:.2f} | {(a - u) * d:.2f} |", flush=True)


if __name__ == "__main__":
    main()
