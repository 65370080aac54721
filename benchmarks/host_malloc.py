"""What glibc's malloc thresholds (config.host_malloc, core/host_malloc.py) cost or save on CPU: each setting's
command run as a fresh process with --config.host_malloc=glibc and =reuse, alternately, with the wall-clock, the
process's user and system CPU time, its minor page faults and its peak RSS (wait4's rusage), and the check that both
computed the same numbers.

    taskset -c 0 python benchmarks/host_malloc.py --out=/tmp/host_malloc [--repeats=2] [--settings=ddpm,text_eval]

Settings: ddpm (configs/default.py, 200 steps), flow (configs/flow.py, 200 steps), text (configs/text.py, 100
steps), each without periodic evaluation; text_eval (--mode=eval of the text run: 128 test sequences x 32 times and
8 samples). Every run starts from an empty workdir (an evaluation from a copy of the text run's), and one run of
each setting before the measured ones fills the compilation cache (OUT/cache), so that every measured run reads its
programs back instead of compiling. Same numbers: the metrics.jsonl records without their clocks (training) or the
eval JSON's values (evaluation) equal across the two settings. Results:
docs/benchmarks/compile.md#host-memory-glibcs-malloc-settings.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLOCKS = ("steps_per_sec", "train_seconds", "periodic/seconds")
SETTINGS = {
    "ddpm": ["--config=configs/default.py", "--config.train.num_steps=200"],
    "flow": ["--config=configs/flow.py", "--config.train.num_steps=200"],
    "text": ["--config=configs/text.py", "--config.train.num_steps=100"],
}
EVAL = ["--mode=eval", "--config.eval.nll_images=128", "--config.eval.num_samples=8"]
QUIET = ["--config.eval.periodic.every=0"]


def run(args: list, workdir: str, malloc: str, cache: str) -> dict:
    """One main.py process; its clocks, CPU times, faults and peak RSS from wait4."""
    cmd = [sys.executable, "main.py", f"--workdir={workdir}", *args, f"--config.host_malloc={malloc}"]
    cmd += [f"--config.compilation_cache={cache}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}\n{out[-3000:]}")
    return dict(
        wall=wall, user=usage.ru_utime, sys=usage.ru_stime, faults=usage.ru_minflt, rss_mib=usage.ru_maxrss / 1024
    )


def numbers(workdir: str, evaluation: bool):
    """What the run computed, without its clocks: the metrics.jsonl records, or the eval JSON's bound."""
    if evaluation:
        name = sorted(f for f in os.listdir(os.path.join(workdir, "eval")) if f.endswith(".json"))[-1]
        with open(os.path.join(workdir, "eval", name)) as f:
            return json.load(f)["nll_bpd"]["value"]
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in CLOCKS} for line in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--settings", default="ddpm,flow,text,text_eval")
    a = ap.parse_args()
    names = a.settings.split(",")
    unknown = [n for n in names if n not in (*SETTINGS, "text_eval")]
    if unknown:
        raise SystemExit(f"error: --settings={unknown[0]} is not one of {', '.join((*SETTINGS, 'text_eval'))}")
    os.makedirs(a.out, exist_ok=True)
    cache = os.path.join(a.out, "cache")
    trained = os.path.join(a.out, "text_trained")
    if "text_eval" in names and not os.path.isdir(trained):
        run(SETTINGS["text"] + QUIET, trained, "reuse", cache)
    rows = {}
    for name in names:
        evaluation = name == "text_eval"
        args = (SETTINGS["text"] + EVAL) if evaluation else (SETTINGS[name] + QUIET)

        def fresh(tag):
            wd = os.path.join(a.out, f"{name}_{tag}")
            shutil.rmtree(wd, ignore_errors=True)
            if evaluation:
                shutil.copytree(trained, wd, ignore=shutil.ignore_patterns("eval"))
            return wd

        run(args, fresh("warm"), "reuse", cache)  # fills the compilation cache
        got = {"glibc": [], "reuse": []}
        computed = {}
        for r in range(a.repeats):
            for malloc in ("glibc", "reuse") if r % 2 == 0 else ("reuse", "glibc"):
                wd = fresh(f"{malloc}{r}")
                got[malloc].append(run(args, wd, malloc, cache))
                computed.setdefault(malloc, numbers(wd, evaluation))
                print(name, malloc, r, {k: round(v, 2) for k, v in got[malloc][-1].items()}, flush=True)
        same = computed["glibc"] == computed["reuse"]
        rows[name] = (got, same)
    lines = [
        f"`{' '.join(['python', *sys.argv])}`, {a.repeats} run(s) of each setting and malloc, alternating; means.",
        "",
        "| setting | malloc | wall-clock (s) | user CPU (s) | system CPU (s) | minor faults | peak RSS (MiB) "
        "| wall-clock, glibc / reuse | same numbers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (got, same) in rows.items():
        mean = {m: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for m, rs in got.items()}
        for m in ("glibc", "reuse"):
            v = mean[m]
            ratio = f"{mean['glibc']['wall'] / mean['reuse']['wall']:.2f}" if m == "reuse" else ""
            lines.append(
                f"| {name} | {m} | {v['wall']:.1f} | {v['user']:.1f} | {v['sys']:.1f} | {v['faults'] / 1e6:.2f} M "
                f"| {v['rss_mib']:.0f} | {ratio} | {('yes' if same else 'NO') if m == 'reuse' else ''} |"
            )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "host_malloc.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
