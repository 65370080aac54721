"""Which sampler wins on the embedded digits: train the default config once per run named on the command line and per
seed, at equal steps, then evaluate each with --mode=eval, and write a markdown table and convergence curves.

    python benchmarks/samplers.py --runs=uniform,adaptive,speed,lognormal,uniform+min_snr --seeds=0,1
    python benchmarks/samplers.py --runs=uniform,adaptive --seeds=0 --set train.num_steps=200   # a quick look
    python benchmarks/samplers.py --config=configs/flow.py --runs=uniform,logitnormal,adaptive,adaptive/reward=bound

    python benchmarks/samplers.py --horizon_of=WORKDIR     # where a long uniform run's test bound stops improving

A run is SAMPLER[+WEIGHTING][/FIELD=VALUE...] (config.sampler.name, config.weighting.name, and fields of the
sampler's own sub-config, config.sampler.SAMPLER.FIELD); `uniform` must be one of them. --config (default
configs/default.py; FILE:ARG as main.py takes it) is the config every run starts from.
Each run is `python main.py` in OUT/RUN_seedS (periodic evaluation every --every steps, the same for all runs), then
`python main.py --mode=eval` on its final checkpoint. A finished run (its eval JSON exists) is not run again, so an
interrupted benchmark continues where it stopped (an interrupted run resumes from its last checkpoint). Runs go
seed by seed (every run of seed 0 first), so that a partial benchmark already has complete pairs. With --jobs=N, N
runs go at once, each pinned to its own share of the CPU cores (os.sched_setaffinity: one XLA device per core it
has); every run then trains under the same conditions, and wall-clock columns compare between runs of one
benchmark, not with a --jobs=1 benchmark. Each run's wall-clock (train and eval) is kept in its bench_seconds.json;
the table gives their sum.

Horizon (--horizon_of=WORKDIR, a long uniform run with periodic evaluation): the first periodic evaluation after
which the bound estimate never falls by more than --tol bits/dim below its value there (the estimate uses the same
test images, timesteps and noise at every evaluation, so what moves it is the model), provided the run went on to at
least 1.5 H (else the run is too short to tell). Prints the curve and H.

Written to OUT: samplers.md (the table) and samplers.png (the curves). Columns:
- final test bits/dim: --mode=eval's full bound (all T timesteps, all 297 test images, EMA), mean +- sample standard
  deviation over seeds (n seeds in the header);
- FID / KID: --mode=eval's (config.eval.fid: 1,000 DDIM-100 samples against the training digits in the digits
  classifier's feature space), mean +- sd over seeds;
- steps / wall-clock to uniform's final bits/dim: the target is the mean over uniform's seeds of the periodic bound
  estimate (periodic/bpd_T*, the same noise and timesteps for every run and step) at the last step; for each seed the
  first periodic evaluation at or below it, and its train_seconds (training wall-clock without evaluation); mean over
  seeds that reach it, with how many did ("-" when none). Resolution: --every steps.
- train wall-clock: train_seconds at the last step, mean over seeds.
- paired differences to uniform (runs other than uniform): the same seed gives every run the same initialisation of
  the diffusion model and the same data order, so per seed d = run - uniform; mean and a 95% interval over seeds
  (Student's t, n - 1 degrees of freedom) of the final test bits/dim, FID and KID.
- bpd at uniform's wall-clock: the periodic bound estimate at the last evaluation whose train_seconds does not
  exceed uniform's whole training wall-clock (mean over uniform's seeds): equal compute rather than equal steps.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse_runs(text):
    from samplers import SAMPLERS
    from weightings import WEIGHTINGS

    runs = []
    for name in text.split(","):
        spec, *settings = name.split("/")
        sampler, _, weighting = spec.partition("+")
        if any("=" not in s for s in settings):
            sys.exit(f"error: --runs: {name!r}: settings after / are FIELD=VALUE of config.sampler.{sampler}")
        if sampler not in SAMPLERS or (weighting and weighting not in WEIGHTINGS):
            sys.exit(
                f"error: --runs: {name!r} is not SAMPLER[+WEIGHTING] with SAMPLER in {', '.join(sorted(SAMPLERS))} "
                f"and WEIGHTING in {', '.join(sorted(WEIGHTINGS))}"
            )
        runs.append((name, sampler, (weighting or "none", settings)))
    if "uniform" not in [r[0] for r in runs]:
        sys.exit("error: --runs must include uniform: the steps-to-target columns are measured against it")
    return runs


def workdir_of(out, name, seed):
    return os.path.join(out, f"{name.replace('/', '__').replace('=', '-')}_seed{seed}")


def run_one(out, name, sampler, weighting, seed, args, cores=None):
    """Train and evaluate one run in its workdir (skipped when its eval exists), on `cores` (None: all)."""
    weighting, settings = weighting
    wd = workdir_of(out, name, seed)
    evals = os.path.join(wd, "eval")
    done = os.path.isdir(evals) and any(f.startswith("step_") and f.endswith(".json") for f in os.listdir(evals))
    if done:
        print(f"{name} seed {seed}: already done", flush=True)
        return wd
    flags = (
        [
            f"--config={os.path.join(ROOT, args.config)}",
            f"--workdir={wd}",
            f"--config.sampler.name={sampler}",
            f"--config.weighting.name={weighting}",
            f"--config.seed={seed}",
            f"--config.eval.periodic.every={args.every}",
        ]
        + [f"--config.sampler.{sampler}.{s}" for s in settings]
        + [f"--config.{s}" for s in args.set]
    )
    seconds = {}
    for mode in ("train", "eval"):
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, os.path.join(ROOT, "main.py"), f"--mode={mode}", *flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores),
        )
        seconds[mode] = time.perf_counter() - t0
        with open(os.path.join(wd, f"{mode}.log"), "w") as f:
            f.write(r.stdout)
        if r.returncode:
            sys.exit(
                f"error: {name} seed {seed} --mode={mode} failed (exit {r.returncode}); log: {wd}/{mode}.log\n"
                + r.stdout[-2000:]
            )
        print(f"{name} seed {seed}: {mode} {seconds[mode]:.0f} s", flush=True)
    path = os.path.join(wd, "bench_seconds.json")
    if os.path.exists(path):  # a resumed run: add this invocation's time to the earlier ones'
        with open(path) as f:
            seconds = {k: v + seconds.get(k, 0.0) for k, v in json.load(f).items()}
    with open(path, "w") as f:
        json.dump(seconds, f)
    return wd


def run_all(out, runs, seeds, args):
    """Every (run, seed) not yet done, seed by seed, args.jobs at a time, each job on its own share of the cores."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(name, s, w, seed) for seed in seeds for name, s, w in runs]
    if args.jobs == 1:
        for name, s, w, seed in jobs:
            run_one(out, name, s, w, seed, args)
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < args.jobs:
        sys.exit(f"error: --jobs={args.jobs} needs at least as many CPU cores; this process may use {len(cores)}")
    shares = queue.Queue()
    for i in range(args.jobs):
        shares.put(set(cores[i :: args.jobs]))

    def job(spec):
        share = shares.get()
        try:
            return run_one(out, *spec, args, cores=share)
        finally:
            shares.put(share)

    with ThreadPoolExecutor(args.jobs) as pool:
        for f in [pool.submit(job, j) for j in jobs]:
            f.result()


def horizon(steps, bpd, tol):
    """The first step whose estimate no later one undercuts by more than tol, or None when the run did not go on to
    1.5 times that step (module docstring)."""
    later_min = np.minimum.accumulate(bpd[::-1])[::-1]
    h = int(steps[np.nonzero(later_min >= bpd - tol)[0][0]])
    return h if steps[-1] >= 1.5 * h else None


def print_horizon(workdir, tol):
    d = load_curve(workdir)
    h = horizon(d["steps"], d["bpd"], tol)
    for s, b, f in zip(d["steps"], d["bpd"], d["fid"] if d["fid"] is not None else [None] * len(d["steps"])):
        print(f"{s:>7} {b:.4f}" + ("" if f is None else f" {f:.3f}") + ("   <- horizon" if s == h else ""))
    if h is None:
        print(f"no horizon yet ({d['bpd_key']}, tol {tol} bits/dim): train longer (the run must reach 1.5 H)")
    else:
        print(f"horizon ({d['bpd_key']}, tol {tol} bits/dim): {h} steps")


def load_curve(wd):
    """The periodic evaluations of a run's metrics.jsonl."""
    from training.report import read_metrics

    rows = read_metrics(os.path.join(wd, "metrics.jsonl"))
    key = next(k for r in rows for k in r if k.startswith("periodic/bpd_T"))
    fid_key = next((k for r in rows for k in r if k.startswith("periodic/fid_N")), None)
    per = [r for r in rows if key in r]
    last = [r for r in rows if "train_seconds" in r][-1]
    return dict(
        steps=np.array([r["step"] for r in per]),
        bpd=np.array([r[key] for r in per]),
        fid=np.array([r.get(fid_key, np.nan) for r in per]) if fid_key else None,
        train_s=np.array([r["train_seconds"] for r in per]),
        total_s=last["train_seconds"],
        bpd_key=key,
        fid_key=fid_key,
    )


def load(wd):
    evals = sorted(f for f in os.listdir(os.path.join(wd, "eval")) if f.startswith("step_") and f.endswith(".json"))
    with open(os.path.join(wd, "eval", evals[-1])) as f:
        ev = json.load(f)
    bench, seconds = {}, os.path.join(wd, "bench_seconds.json")
    if os.path.exists(seconds):
        with open(seconds) as f:
            bench = json.load(f)
    return dict(
        load_curve(wd),
        bench_s=sum(bench.values()),
        final_bpd=ev["nll_bpd"]["value"],
        fid_final=ev["fid"].get("fid"),
        kid_final=ev["fid"].get("kid"),
        eval=ev,
    )


def reach(d, target):
    """(step, train_seconds) of the first periodic evaluation at or below target, or None."""
    hit = np.nonzero(d["bpd"] <= target)[0]
    return None if len(hit) == 0 else (int(d["steps"][hit[0]]), float(d["train_s"][hit[0]]))


def ms(values, fmt):
    v = np.array([x for x in values if x is not None], np.float64)
    if len(v) == 0:
        return "-"
    return fmt.format(v.mean()) + (" ± " + fmt.format(v.std(ddof=1)) if len(v) > 1 else "")


def paired(results, name, key):
    """'mean [lo, hi]' of the per-seed difference run - uniform (95% t interval), or '-'."""
    from scipy import stats

    pairs = [(d[key], u[key]) for d, u in zip(results[name], results["uniform"])]
    diff = np.array([a - b for a, b in pairs if a is not None and b is not None], np.float64)
    if len(diff) == 0:
        return "-"
    if len(diff) == 1:
        return f"{diff[0]:+.3f}"
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
    return f"{diff.mean():+.3f} [{diff.mean() - half:+.3f}, {diff.mean() + half:+.3f}]"


def at_wall_clock(d, seconds):
    """The periodic bound estimate at the last evaluation within `seconds` of training, or None."""
    ok = np.nonzero(d["train_s"] <= seconds)[0]
    return None if len(ok) == 0 else float(d["bpd"][ok[-1]])


def table(results, runs, seeds, config):
    target = float(np.mean([d["bpd"][-1] for d in results["uniform"]]))
    budget = float(np.mean([d["total_s"] for d in results["uniform"]]))
    some = results["uniform"][0]
    every = int(some["steps"][1] - some["steps"][0]) if len(some["steps"]) > 1 else "-"
    cmd = "python benchmarks/samplers.py " + " ".join(sys.argv[1:])
    lines = [
        f"`{cmd}`",
        "",
        f"Config {config}, {len(seeds)} seed(s) ({', '.join(map(str, seeds))}) per run, "
        f"{int(some['steps'][-1])} steps each; mean ± sd over seeds; paired differences to uniform: mean "
        "[95% interval] over seeds.",
        "",
        f"| run | final test bits/dim | FID | KID | steps to uniform's final {some['bpd_key'].split('/')[1]} "
        f"({target:.3f}) | wall-clock to it (s) | train wall-clock (s) | {some['bpd_key'].split('/')[1]} at "
        f"uniform's wall-clock ({budget:.0f} s) | Δ bits/dim vs uniform | Δ FID | Δ KID |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, _, _ in runs:
        ds = results[name]
        hits = [reach(d, target) for d in ds]
        ok = [h for h in hits if h]
        reached = f"{np.mean([h[0] for h in ok]):.0f} ({len(ok)}/{len(ds)})" if ok else f"- (0/{len(ds)})"
        wall = f"{np.mean([h[1] for h in ok]):.0f}" if ok else "-"
        lines.append(
            f"| {name} | {ms([d['final_bpd'] for d in ds], '{:.3f}')} | "
            f"{ms([d['fid_final'] for d in ds], '{:.3f}')} | {ms([d['kid_final'] for d in ds], '{:.4f}')} | "
            f"{reached} | {wall} | {ms([d['total_s'] for d in ds], '{:.0f}')} | "
            f"{ms([at_wall_clock(d, budget) for d in ds], '{:.3f}')} | "
            + " | ".join(
                "-" if name == "uniform" else paired(results, name, k) for k in ("final_bpd", "fid_final", "kid_final")
            )
            + " |"
        )
    ev = some["eval"]
    fp = ev["fid"].get("protocol", {})
    lines += [
        "",
        f"Bits/dim: {ev['nll_bpd']['protocol']['bound']}, {ev['nll_bpd']['protocol']['images']} test "
        f"images. FID/KID: {fp.get('samples')} samples, {fp.get('method')} {fp.get('steps')} steps, "
        f"{fp.get('features')}; reference {fp.get('reference')}; the test split itself scores FID "
        f"{ev['fid'].get('test_split', {}).get('fid', float('nan')):.3f}. Curves: periodic evaluation "
        f"({some['bpd_key']}, {some['fid_key']}) every {every} steps.",
    ]
    total = sum(d["bench_s"] for ds in results.values() for d in ds)
    if total:
        lines += [
            "",
            f"Compute: the runs' wall-clock (train and eval, bench_seconds.json) sums to {total / 3600:.2f} h "
            "(with --jobs=N the benchmark's elapsed time is about 1/N of it).",
        ]
    return "\n".join(lines)


def plot(results, runs, path):
    from matplotlib.figure import Figure

    some = results["uniform"][0]
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for name, _, _ in runs:
        ds = results[name]
        steps = ds[0]["steps"]
        for ax, k in zip(axes, ("bpd", "fid")):
            if ds[0][k] is None:
                continue
            v = np.array([d[k] for d in ds])
            (line,) = ax.plot(steps, v.mean(0), label=name)
            if len(ds) > 1:
                ax.fill_between(steps, v.min(0), v.max(0), color=line.get_color(), alpha=0.2)
    axes[0].set_ylabel(f"{some['bpd_key']} (bits/dim)")
    axes[1].set_ylabel(some["fid_key"] or "FID")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.legend()
    fig.suptitle("periodic evaluation (EMA): mean over seeds, band = min..max")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="uniform,adaptive,speed,lognormal,uniform+min_snr")
    ap.add_argument("--config", default="configs/default.py", help="the config file every run starts from (FILE[:ARG])")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--every", type=int, default=250, help="periodic evaluation interval (steps)")
    ap.add_argument("--out", default=os.path.join(ROOT, "workdirs", "bench_samplers"))
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time, each on its own share of the cores")
    ap.add_argument("--horizon_of", default="", help="print where this run's bound estimate stops improving")
    ap.add_argument("--tol", type=float, default=0.01, help="bits/dim, for --horizon_of")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config override for every run, e.g. train.num_steps=500 (repeatable)",
    )
    args = ap.parse_args()
    if args.horizon_of:
        return print_horizon(args.horizon_of, args.tol)
    runs = parse_runs(args.runs)
    seeds = [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    run_all(args.out, runs, seeds, args)
    results = {name: [load(workdir_of(args.out, name, seed)) for seed in seeds] for name, _, _ in runs}
    md = table(results, runs, seeds, args.config)
    with open(os.path.join(args.out, "samplers.md"), "w") as f:
        f.write(md + "\n")
    plot(results, runs, os.path.join(args.out, "samplers.png"))
    print(md)
    print(f"\nWritten: {args.out}/samplers.md, {args.out}/samplers.png ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
