"""The same training in a plain process and in a notebook kernel: what core/host_malloc.py's settings are worth
where the kernel's own threads fixed glibc's arena limit first (docs/config.md#host-memory).

    taskset -c 0 python benchmarks/kernel_malloc.py --out=/tmp/kernel_malloc [--repeats=2] [--steps=120]

Each mode trains configs/text.py for STEPS steps (no periodic evaluation) in-process, as notebooks/text.ipynb does,
from an empty workdir, the compilation cache shared (a first run fills it): "process", a fresh Python process;
"kernel", a Jupyter kernel started by nbclient, as a user's notebook runs; "kernel+env", a kernel started with
host_malloc.ADVICE's variables in its environment. Reported per mode: what the malloc settings said and the train
steps per second of the last logging window (the compiled step, without start-up), each repeat, modes alternating.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
BODY = """
import json, os, sys
sys.path.insert(0, {root!r})
from configs.text import get_config
from training.platform import prepare_host
c = get_config()
c.train.num_steps, c.train.log_every, c.eval.periodic.every = {steps}, {steps} // 3, 0
c.compilation_cache = {cache!r}
said = prepare_host(c)[-1]  # CPU devices, compilation cache, then the malloc settings' words
from drivers.train import train
train(c, {workdir!r})
rows = [json.loads(line) for line in open(os.path.join({workdir!r}, "metrics.jsonl")) if "steps_per_sec" in line]
print("RESULT " + json.dumps(dict(said=said, steps_per_sec=rows[-1]["steps_per_sec"])))
"""


def one(mode: str, workdir: str, steps: int, cache: str) -> dict:
    shutil.rmtree(workdir, ignore_errors=True)
    code = BODY.format(root=ROOT, steps=steps, cache=cache, workdir=workdir)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if mode == "process":
        out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
        text = out.stdout
    else:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update({**clean, **(ENV if mode == "kernel+env" else {})})  # the kernel inherits this
        try:
            NotebookClient(nb, timeout=1800, kernel_name="python3").execute()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        text = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    return json.loads(re.search(r"RESULT (.*)", text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    cache = os.path.join(args.out, "cache")
    modes = ("process", "kernel", "kernel+env")
    one("process", os.path.join(args.out, "warm"), args.steps, cache)  # fills the compilation cache
    rates = {m: [] for m in modes}
    said = {}
    for r in range(args.repeats):
        for m in modes:
            got = one(m, os.path.join(args.out, f"{m}_{r}"), args.steps, cache)
            rates[m].append(got["steps_per_sec"])
            said[m] = got["said"]
            print(f"{m} #{r}: {got['steps_per_sec']:.2f} steps/s ({got['said']})", flush=True)
    base = sum(rates["process"]) / len(rates["process"])
    print("\n| mode | steps/s | process / mode | the malloc settings said |\n|---|---|---|---|")
    for m in modes:
        mean = sum(rates[m]) / len(rates[m])
        print(f"| {m} | {', '.join(f'{x:.2f}' for x in rates[m])} | {base / mean:.2f} | {said[m][:90]} |")


if __name__ == "__main__":
    main()
