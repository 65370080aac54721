"""Which sampler wins on the embedded digits: train the default config once per run named on the command line and per
seed, at equal steps, then evaluate each with --mode=eval, and write a markdown table and convergence curves.

    python benchmarks/samplers.py --runs=uniform,adaptive,speed,lognormal,uniform+min_snr --seeds=0,1
    python benchmarks/samplers.py --runs=uniform,adaptive --seeds=0 --set train.num_steps=200   # a quick look
    python benchmarks/samplers.py --config=configs/flow.py --runs=uniform,logitnormal,adaptive,adaptive/reward=bound
    python benchmarks/samplers.py --config=configs/flow.py \
        --runs=uniform,infonoise,adaptive_noise,logitnormal/shift=3.0,adaptive/importance_weights=True
    python benchmarks/samplers.py --horizon_of=WORKDIR     # where a long uniform run's test bound stops improving
    python benchmarks/samplers.py --size_from=OUT          # a pilot's sd of the paired differences, seeds needed
    python benchmarks/samplers.py ... --records=benchmarks/records/ddpm22   # keep finished runs in the repository
    python benchmarks/samplers.py ... --rivals=adaptive_noise,beta/a=0.34/b=3.3   # every run paired with these too

A run is SAMPLER[+WEIGHTING][/FIELD=VALUE...] (config.sampler.name, config.weighting.name, and fields of the
sampler's own sub-config, config.sampler.SAMPLER.FIELD); the baseline (--baseline: `uniform`, or another run
such as `lognormal`, EDM's own density) must be one of them, and every paired column below ("uniform" in what
follows) is against it. Each FIELD=VALUE is checked before anything trains (parse_setting): FIELD must be one of
the sampler's fields and VALUE of its kind, read as
main.py's flags read it (a bool True/False/true/1/0, an int, a float such as 0 or 3.0, a choice by name, a tuple of
integers with colons, policy_channels=32:64:128), in its
range where the range does not depend on the rest of the config. --config (default configs/default.py; FILE:ARG
as main.py takes it) is the config every run starts from.
Each run is `python main.py` in OUT/RUN_seedS (periodic evaluation every --every steps, the same for all runs), then
`python main.py --mode=eval` on its final checkpoint. A finished run (its eval JSON exists) is not run again, so an
interrupted benchmark continues where it stopped (an interrupted run resumes from its last checkpoint; a training
that a signal stopped, which main.py ends with status 0 and a checkpoint, is not evaluated: the benchmark stops
with a line naming the run and the step, see not_trained). Runs go
seed by seed (every run of seed 0 first), so that a partial benchmark already has complete pairs. With --jobs=N, N
runs go at once, each pinned to its own share of the CPU cores (os.sched_setaffinity: one XLA device per core it
has); every run then trains under the same conditions, and wall-clock columns compare between runs of one
benchmark, not with a --jobs=1 benchmark. Each run's wall-clock (train and eval) is kept in its bench_seconds.json,
rewritten every 15 s while the run goes, so that an invocation that is killed still counts (older records count
only the invocations that finished: docs/benchmarks/rivals.md#the-tables-cost); the table gives
their sum (the benchmark's own process writes it: to stop a benchmark, stop main.py first and let the benchmark
see it end, else the runs' last seconds go uncounted). The output of main.py goes to train.log and eval.log as it
runs, a resumed run's after the earlier one's.

Compilation cache (--compilation_cache=DIR, default OUT/jax_cache; `off` for none): every main.py of the benchmark
runs with JAX's persistent compilation cache in DIR (JAX_COMPILATION_CACHE_DIR, every program cached), so that only
the first run of a table compiles a program and the others read it back: the evaluation programs are the same in
every run of a table, the train step in every seed of a run. The numbers are the same with or without it (an
executable read back is the one compiled); the wall-clock is not (which committed runs had it, and what it saved:
docs/benchmarks/measurement.md#the-bound-estimate-in-the-tables-2026-12-04).

Records (--records=DIR): a table of many seeds outlives the machine it started on. A finished run's record is the
few files the table is built from (RECORD_FILES: its config, metrics.jsonl, bench_seconds.json, fingerprints.json
and eval JSONs; no checkpoint; 50 to 90 kB for a DDPM run of 2,000 steps). With --records, each run's record is
copied to DIR/RUN_seedS as soon as the run finishes, and before anything trains every record in DIR whose workdir
is absent from OUT is copied into OUT, so that the run counts as finished and is not run again: commit DIR, and a
clean clone on another machine continues the table where the last one stopped. A workdir already in OUT is never
overwritten by a record (a partial run there resumes).

Measured alike: a record carries what it was measured with (fingerprints.json: the content hashes of the data its
run read, the code revision, library versions, processor and XLA flags of each attempt; the eval JSON: the FID
feature network's hash beside every FID and KID, and its reference's). Two runs are paired on bits/dim only when
their data hashes agree, on FID and KID only when their feature networks and references agree too; a pair that does
not is left out of that comparison, with one line naming the seeds and why (--allow_mixed keeps it and says so).
A record that predates fingerprints has none: its data are taken as alike (the table says how many were not
fingerprinted), and its feature network is told apart by the test split's own FID against the same reference
(FID_PROBE_RTOL), which differs between two networks. Under each table: the hashes it was computed with.

Horizon (--horizon_of=WORKDIR, a long uniform run with periodic evaluation): the first periodic evaluation after
which the bound estimate never falls by more than --tol bits/dim below its value there (the estimate uses the same
test images, timesteps and noise at every evaluation, so what moves it is the model), provided the run went on to at
least 1.5 H (else the run is too short to tell). Prints the curve and H.

Written to OUT: samplers.md (the table, its verdicts and the policy summary), samplers.png (the curves) and, when a
run uses the learned sampler, policy.png. Columns:
- final test bits/dim: --mode=eval's full bound (all T timesteps, all 297 test images, EMA), mean +- sample standard
  deviation over seeds (n seeds in the header); with --bound_strata=K (and --bound_per_stratum=M, default 2) its
  unbiased stratified estimate from d + K M network rows per image instead (config.eval.bound_strata,
  .bound_per_stratum; d = eval.bound_decoder_draws, 32, which --set changes; DDPM and vp only), and a line under
  the table gives its largest standard error against a quarter of the table's smallest bits/dim MDD, the rule for
  using it (docs/benchmarks/measurement.md#the-bound-estimate-in-the-tables-2026-12-04). Default 0: the full
  bound, as every record in benchmarks/records/;
- FID / KID: --mode=eval's (config.eval.fid: 1,000 DDIM-100 samples against the training digits in the digits
  classifier's feature space), mean +- sd over seeds;
- steps / wall-clock to uniform's final bits/dim: the target is the mean over uniform's seeds of the periodic bound
  estimate (periodic/bpd_T*, the same noise and timesteps for every run and step) at the last step; for each seed the
  first periodic evaluation at or below it, and its train_seconds (training wall-clock without evaluation); mean over
  seeds that reach it, with how many did ("-" when none), over the seeds on uniform's data (another data's seeds
  are left out, counted in the cell and named under the table). Resolution: --every steps.
- steps to uniform's final FID (when the periodic evaluation scores FID, periodic/fid_N*): the same rule on the
  periodic FID (fewer samples than the final FID, so a noisier curve; a seed whose FID dips below the target once
  counts as reaching it there), over the seeds whose periodic FID was measured with uniform's network (another
  network's seeds are left out and named under the table; "mixed" where uniform's own seeds were not all alike).
- train wall-clock: train_seconds at the last step, mean over seeds.
- paired differences to uniform (runs other than uniform): the same seed gives every run the same initialisation of
  the diffusion model and the same data order, so per seed d = run - uniform; mean and a 95% interval over seeds
  (Student's t, n - 1 degrees of freedom) of the final test bits/dim, FID and KID, each with its minimum detectable
  difference MDD = (t_{1-alpha/2, n-1} + t_{1-beta, n-1}) sd_d / sqrt(n) at two-sided alpha = 0.05 and power
  1 - beta = 0.8 (mdd: the common approximation with t quantiles of n - 1 degrees of freedom; mdd_exact solves the
  noncentral-t power, scipy.stats.nct: the approximation is 0.95 of it at n = 3, 0.99 at n = 5 and within 0.2% from
  n = 10 on, so the table uses the approximation and --size_from shows both);
- seeds for 0.05 bits/dim (--detect): the smallest n with (t_{.975, n-1} + t_{.8, n-1}) sd_d / sqrt(n) <= 0.05,
  sd_d the observed sd of the bits/dim differences. Bits/dim only in the table; --size_from gives FID and KID too,
  for a difference of 10% of uniform's mean (FID and KID have no unit-free target as bits/dim's 0.05).
- bpd at uniform's wall-clock: the periodic bound estimate at the last evaluation whose train_seconds does not
  exceed uniform's whole training wall-clock (mean over uniform's seeds): equal compute rather than equal steps.

Verdicts, one sentence per run under the table, per metric: "RUN is lower/higher than uniform (95% interval excludes
0)", or "not separated: the table could have detected |d| >= MDD".

A process on tokens (the masked diffusion LM, configs/text.py) has no FID: its table drops the FID and KID columns,
gives in its own unit (bits per token) each final estimate's standard error over test sequences (the runs of a seed
share the sequences, times and masks), and lists the first text samples of each run's final evaluation (their file
is part of the record). --beside=OUT reads another benchmark's finished runs under the table, each paired with
uniform on the seeds both have (the autoregressive baseline of the same size beside the masked LM's samplers).

Does the policy move? (every run of the learned sampler, `adaptive` with any settings): from each seed's
metrics.jsonl, sampler/policy_density (the policy's mean probability per bin of normalised t, density_bins bins, as
of its last update, every update_every steps) gives the mean u of the mean density and its total variation distance
from uniform (density_summary), and sampler/policy_spread the spread across images; policy.png plots the three
against the training step (one line per seed) and samplers.md gives per run their final values, mean ± sd over
seeds, the path (mean u and TV at each quarter of the run, each seed's largest TV), and across seeds the correlation
of the run's average mean u with its paired Δ bits/dim (walk_and_gain: does the direction it went decide the gain?).

Sizing (--size_from=OUT, a finished or partial pilot benchmark): per run found in OUT (its finished workdirs, the
name read back from the workdir's), over the seeds where it and uniform both finished: mean and sd of d, MDD (both
versions) and the seeds that would detect 0.05 bits/dim (--detect), or 10% of uniform's mean FID / KID, at that sd.
A pilot's sd is itself uncertain (with 3 seeds its 95% interval is 0.52x to 6.3x the observed one): size with a
margin.
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


BOOL_TEXT = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}  # absl's BooleanParser


def parse_setting(sampler, setting):
    """(FIELD, value) of one FIELD=VALUE of config.sampler.SAMPLER, the value read as the field's kind (bool: True,
    false, 1, 0 ..., as main.py's flags read it; int; float; a choice by name) and checked against its range where
    the range does not depend on the rest of the config (a bound such as T is main.py's to check). Raises
    ValueError with one line saying what is wrong."""
    from config.fields import ConfigError, Context, nearest
    from samplers import SAMPLERS

    field, _, text = setting.partition("=")
    fields = SAMPLERS.fields_of(sampler)
    if field not in fields:
        near = nearest(field, fields)
        hint = f"; did you mean {near}?" if near else f"; its fields: {', '.join(sorted(fields)) or 'none'}"
        raise ValueError(f"{field!r} is not a field of config.sampler.{sampler}{hint}")
    f = fields[field]
    # a tuple is written with colons (commas separate runs): policy_channels=32:64:128; an empty one as ()
    ints = lambda x: () if x == "()" else tuple(int(v) for v in x.split(":"))
    read = {"bool": lambda x: BOOL_TEXT[x.lower()], "int": int, "num": float, "ints": ints}.get(f.kind, str)
    try:
        value = read(text)
    except (KeyError, ValueError):
        raise ValueError(f"{text!r} is not a {f.kind} (config.sampler.{sampler}.{field})") from None
    try:
        f.check(f"sampler.{sampler}.{field}", value, Context())
    except KeyError:  # a bound named after another part of the config (e.g. T): main.py checks it
        pass
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return field, value


def setting_flag(sampler, setting):
    """main.py's flag of one FIELD=VALUE of --runs (a colon tuple becomes (a,b,c))."""
    field, value = parse_setting(sampler, setting)
    text = (
        "(" + ",".join(map(str, value)) + ("," if len(value) == 1 else "") + ")" if isinstance(value, tuple) else None
    )
    return f"--config.sampler.{sampler}.{field}={text}" if text else f"--config.sampler.{sampler}.{setting}"


def parse_runs(text):
    """[(name, sampler, (weighting, settings))] of --runs (module docstring), every FIELD=VALUE checked by
    parse_setting; exits with one line on a bad run."""
    from samplers import SAMPLERS
    from weightings import WEIGHTINGS

    runs = []
    for name in text.split(","):
        spec, *settings = name.split("/")
        sampler, _, weighting = spec.partition("+")
        if sampler not in SAMPLERS or (weighting and weighting not in WEIGHTINGS):
            sys.exit(
                f"error: --runs: {name!r} is not SAMPLER[+WEIGHTING] with SAMPLER in {', '.join(sorted(SAMPLERS))} "
                f"and WEIGHTING in {', '.join(sorted(WEIGHTINGS))}"
            )
        if any("=" not in s for s in settings):
            sys.exit(f"error: --runs: {name!r}: settings after / are FIELD=VALUE of config.sampler.{sampler}")
        for setting in settings:
            try:
                parse_setting(sampler, setting)
            except ValueError as e:
                sys.exit(f"error: --runs: {name!r}: {e}")
        runs.append((name, sampler, (weighting or "none", settings)))
    if BASE not in [r[0] for r in runs]:
        sys.exit(f"error: --runs must include {BASE} (--baseline): the paired columns are measured against it")
    return runs


def workdir_of(out, name, seed):
    return os.path.join(out, f"{name.replace('/', '__').replace('=', '-')}_seed{seed}")


def timed(cmd, log, path, key, cores=None, every=15.0):
    """Run cmd (in ROOT, output to the file log, on `cores`) and add its wall-clock to path[key] (a JSON object of
    seconds, created if absent) every `every` seconds while it runs and once when it ends, so that the time of an
    invocation that is killed is kept too (up to `every` seconds of it). Returns (exit status, seconds)."""
    earlier = {}
    if os.path.exists(path):  # a resumed run: this invocation's time adds to the earlier ones'
        with open(path) as f:
            earlier = json.load(f)

    def record(seconds):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({**earlier, key: earlier.get(key, 0.0) + seconds}, f)
        os.replace(tmp, path)  # a kill mid-write leaves the previous record, not a truncated one

    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "a") as out:  # a resumed run's log follows the interrupted invocation's
        p = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores),
        )
        while True:
            try:
                rc = p.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                record(time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    record(seconds)
    return rc, seconds


RECORD_FILES = (  # the eval JSON last: a record copied only in part is not finished
    "run_config.json",
    "metrics.jsonl",
    "bench_seconds.json",
    "fingerprints.json",
    "eval/samples_*.txt",  # a process on tokens: the final evaluation's text samples (a few kB)
    "eval/step_*.json",
)


def finished(wd):
    """Whether the run in workdir wd has been evaluated (an eval/step_*.json exists)."""
    evals = os.path.join(wd, "eval")
    return os.path.isdir(evals) and any(f.startswith("step_") and f.endswith(".json") for f in os.listdir(evals))


def keep_record(wd, records):
    """Copy the record of the finished run in wd (RECORD_FILES) to records/<its workdir's name>, atomically per file."""
    import glob
    import shutil

    dest = os.path.join(records, os.path.basename(wd))
    for pattern in RECORD_FILES:
        for src in sorted(glob.glob(os.path.join(wd, pattern))):
            target = os.path.join(dest, os.path.relpath(src, wd))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(src, target + ".tmp")
            os.replace(target + ".tmp", target)
    return dest


def restore_records(records, out):
    """Copy into `out` every finished record in `records` whose workdir `out` lacks; returns the names restored.
    An existing workdir is left as it is (a partial run there resumes rather than being replaced)."""
    import shutil

    restored = []
    if not os.path.isdir(records):
        return restored
    for entry in sorted(os.listdir(records)):
        src, dest = os.path.join(records, entry), os.path.join(out, entry)
        if not finished(src):
            continue
        if os.path.exists(dest):
            if not finished(dest):
                print(f"record {entry}: not restored, {dest} exists (its run resumes there)", flush=True)
            continue
        shutil.copytree(src, dest)
        restored.append(entry)
    return restored


def cache_env(cache, out):
    """The environment settings that give every main.py of a benchmark JAX's persistent compilation cache in `cache`
    (--compilation_cache; "" for OUT/jax_cache), or turn it off ("off", even where the environment turned it on)."""
    if cache == "off":
        return {"JAX_ENABLE_COMPILATION_CACHE": "false"}
    return {
        "JAX_ENABLE_COMPILATION_CACHE": "true",
        "JAX_COMPILATION_CACHE_DIR": os.path.abspath(cache or os.path.join(out, "jax_cache")),
        # every program, however small or quick to compile (JAX's defaults skip those under 1 s)
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def check_bound_flags(args):
    """Exit with one line when --bound_strata / --bound_per_stratum are values config.eval refuses for the
    benchmark's config (the fields' own checks and the process's, config/sections.py), before anything trains."""
    if not args.bound_strata:
        return
    from config.fields import ConfigError
    from config.validate import validate

    c = load_config(args.config, args.set)
    c.eval.bound_strata, c.eval.bound_per_stratum = args.bound_strata, args.bound_per_stratum
    try:
        validate(c)
    except ConfigError as e:
        sys.exit(f"error: --bound_strata / --bound_per_stratum: {e}")


def run_one(out, name, sampler, weighting, seed, args, cores=None):
    """Train and evaluate one run in its workdir (skipped when its eval exists), on `cores` (None: all)."""
    weighting, settings = weighting
    wd = workdir_of(out, name, seed)
    if finished(wd):
        print(f"{name} seed {seed}: already done", flush=True)
        if args.records:
            keep_record(wd, args.records)
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
        + [setting_flag(sampler, s) for s in settings]
        + [f"--config.{s}" for s in args.set]
    )
    path = os.path.join(wd, "bench_seconds.json")
    for mode in ("train", "eval"):
        cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--mode={mode}", *flags]
        if mode == "eval" and args.bound_strata:  # the final bound's stratified estimate (module docstring)
            cmd += [
                f"--config.eval.bound_strata={args.bound_strata}",
                f"--config.eval.bound_per_stratum={args.bound_per_stratum}",
            ]
        rc, seconds = timed(cmd, os.path.join(wd, f"{mode}.log"), path, mode, cores)
        if rc:
            with open(os.path.join(wd, f"{mode}.log"), errors="replace") as f:
                tail = f.read()[-2000:]
            sys.exit(f"error: {name} seed {seed} --mode={mode} failed (exit {rc}); log: {wd}/{mode}.log\n" + tail)
        print(f"{name} seed {seed}: {mode} {seconds:.0f} s", flush=True)
        if mode == "train":
            not_trained(wd, target_steps(args), f"{name} seed {seed}")
    if args.records:
        print(f"{name} seed {seed}: record kept in {keep_record(wd, args.records)}", flush=True)
    return wd


def not_trained(wd, wanted, what):
    """Exit with one line unless the newest checkpoint in workdir wd (orbax's step folders) is at step `wanted`: a
    main.py stopped by a signal (Ctrl-C reaches the benchmark's children too; a preemption) exits 0 with the
    checkpoint it stopped at, and evaluating that would put a half-trained run in the table."""
    ckpts = os.path.join(wd, "checkpoints")
    reached = max((int(d) for d in os.listdir(ckpts) if d.isdigit()), default=None) if os.path.isdir(ckpts) else None
    if reached != wanted:
        sys.exit(
            f"error: {what} stopped at step {reached} of {wanted} (a signal?), so it is not evaluated; run the same "
            f"command to resume it. Log: {wd}/train.log"
        )


def literal(text: str):
    """A Python literal, or the text itself (a string value on the command line)."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_config(spec: str, sets):
    """A config file (configs/NAME.py[:ARG], as main.py's --config) with FIELD=VALUE overrides."""
    import importlib

    from config.fields import override

    path, _, arg = spec.partition(":")
    name = os.path.splitext(os.path.relpath(os.path.join(ROOT, path), ROOT))[0].replace(os.sep, ".")
    module = importlib.import_module(name)
    c = module.get_config(arg) if arg else module.get_config()
    return override(c, {k: literal(v) for k, _, v in (kv.partition("=") for kv in sets)})


def target_steps(args):
    """train.num_steps of the benchmark's config with its --set overrides (the runs' own settings never change it)."""
    return int(load_config(args.config, args.set).train.num_steps)


def run_all(out, runs, seeds, args):
    """Every (run, seed) not yet done, seed by seed, args.jobs at a time, each job on its own share of the cores."""
    import queue
    import threading
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

    failed = threading.Event()

    def job(spec):
        if failed.is_set():  # a run failed or was stopped: no other run starts (a worker takes the next job at once)
            return None
        share = shares.get()
        try:
            return run_one(out, *spec, args, cores=share)
        except BaseException:
            failed.set()
            raise
        finally:
            shares.put(share)

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(job, j) for j in jobs]
        try:
            for f in futures:
                f.result()
        except BaseException:  # Ctrl-C here too: the runs under way end, none other starts
            failed.set()
            raise


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
    # periodic/fid_N250/<tag> since 2026-12-08 (evaluation.quality.fid_tag), periodic/fid_N250 before: the table
    # names the column without the tag and compares curves by the periodic network in fingerprints.json
    fid_key = next(("/".join(k.split("/")[:2]) for r in rows for k in r if k.startswith("periodic/fid_N")), None)
    named = lambda r: [k for k in r if k == fid_key or k.startswith(f"{fid_key}/")]  # this N's, tagged or not
    fid_of = lambda r: next((r[k] for k in named(r)), np.nan)
    tags = []  # the tags its FID was logged with, in order: more than one, a curve of two metrics (curve_alike)
    for r in rows:
        for k in named(r):
            if k != fid_key and (not tags or tags[-1] != k.split("/")[2]):
                tags.append(k.split("/")[2])
    per = [r for r in rows if key in r]
    last = [r for r in rows if "train_seconds" in r][-1]
    return dict(
        steps=np.array([r["step"] for r in per]),
        bpd=np.array([r[key] for r in per]),
        fid=np.array([fid_of(r) for r in per]) if fid_key else None,
        train_s=np.array([r["train_seconds"] for r in per]),
        total_s=last["train_seconds"],
        periodic_s=sum(r.get("periodic/seconds", 0.0) for r in per),
        bpd_key=key,
        fid_key=fid_key,
        fid_tags=tags,
    )


def bound_unit(ev) -> str:
    """The unit of an eval record's bound: its process's own (a process on tokens: bits per token, which is per
    character on a character corpus), else bits/dim."""
    return ev["nll_bpd"].get("protocol", {}).get("units", "bits/dim")


def in_unit(text: str, unit: str) -> str:
    """A report written in bits/dim, in `unit` instead."""
    return text if unit == "bits/dim" else text.replace("bits/dim", unit).replace("Bits/dim", unit.capitalize())


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
        eval_s=bench.get("eval", 0.0),
        final_bpd=ev["nll_bpd"]["value"],
        fid_final=ev.get("fid", {}).get("fid"),
        kid_final=ev.get("fid", {}).get("kid"),
        eval=ev,
        fp=measured_with(wd, ev),
    )


def hashes(data) -> str | None:
    """One data fingerprint ({split: hash}) as a table names it, None where there is none or a split could not be
    hashed (read record by record)."""
    if not data or any(str(v).startswith("unknown") for v in data.values()):
        return None
    return "/".join(f"{k} {v}" for k, v in sorted(data.items()))


def history(rec: dict, field: str, view=lambda v: v):
    """The values a fingerprints.json field took over the run's attempts (each seen through `view`), in order, a
    repeat of the one before merged (a run resumed with other data or another network has several:
    report.record_fingerprints)."""
    seen = []
    for v in [a[field] for a in rec.get("attempts", []) if field in a] or [rec.get(field)]:
        v = None if v is None else view(v)
        if v is not None and (not seen or v != seen[-1]):
            seen.append(v)
    return seen


def measured_here(config) -> dict:
    """What a benchmark's own measurement ran on, for its JSON: the content hashes of the config's data splits and
    the environment (code revision, versions, processor, platform, XLA flags)."""
    from core import fingerprint
    from data import data_fingerprints

    return dict(data=data_fingerprints(config.data), **fingerprint.environment(ROOT))


def as_given(args) -> dict:
    """A command's arguments for its JSON, with any absolute path written as <path> (a record names no path of the
    machine that wrote it; a path relative to the repository stays)."""
    from core import fingerprint

    def given(v):
        if isinstance(v, str):
            return fingerprint.without_paths(v)
        return [given(x) for x in v] if isinstance(v, (list, tuple)) else v

    return {k: given(v) for k, v in vars(args).items()}


def network_name(fp: dict) -> str:
    """An FID's feature space as a table names it: the network's hash, its reference's, a latent model's decoder's."""
    decoder = f", decoder {fp['decoder']}" if fp.get("decoder") else ""
    return f"{fp.get('network')} (reference {fp.get('reference')}{decoder})"


def measured_with(wd, ev) -> dict:
    """What a finished run was measured with: data (the content hashes of the train and test splits it trained on,
    from fingerprints.json, and of those its final evaluation read, from the eval JSON, each different one named in
    order: a run resumed or evaluated on other data is alike only to a run with the same history); features (its
    final FID's feature network and reference, from the eval JSON); decoder (a latent model's, None before
    2026-12-07's evening); periodic (the network and reference of its periodic FID); each None in a record that predates
    fingerprints or whose data could not be hashed; probe: the test split's own FID against the same reference,
    which tells two feature networks apart where no hash says which (FID_PROBE_RTOL)."""
    path = os.path.join(wd, "fingerprints.json")
    rec = {}
    if os.path.exists(path):
        with open(path) as f:
            rec = json.load(f)
    data = [hashes(d) for d in history(rec, "data")]
    final = hashes(ev.get("fingerprints", {}).get("data"))
    if final and (not data or data[-1] != final):
        data.append(final)
    # the periodic FID's network and reference; its decoder is the final FID's (compared as `decoder`), which an
    # attempt before 2026-12-07's evening did not name: a run resumed across that change is one network, not two
    periodic = history(rec, "periodic_features", lambda p: network_name(dict(p, decoder=None)))
    fid = ev.get("fid", {})
    fp = fid.get("protocol", {}).get("fingerprint") or {}
    features = network_name(dict(fp, decoder=None)) if fp.get("network") else None
    return dict(
        decoder=fp.get("decoder"),  # compared only where both runs name one: older records do not
        data=None if None in data or not data else " then ".join(data),
        features=features,
        periodic=" then ".join(periodic) if periodic else None,
        probe=fid.get("test_split", {}).get("fid"),
    )


def reach(d, target, key="bpd"):
    """(step, train_seconds) of the first periodic evaluation whose `key` ("bpd" or "fid") is at or below target, or
    None."""
    hit = np.nonzero(d[key] <= target)[0]
    return None if len(hit) == 0 else (int(d["steps"][hit[0]]), float(d["train_s"][hit[0]]))


def left_out(what: str, verb: str, why: str) -> bool:
    """Name a comparison of runs not measured alike, once (MIXED, and stderr when first met): "WHAT not VERB" or,
    with ALLOW_MIXED, "WHAT VERB anyway (--allow_mixed)", then WHY (which starts with its separator); True when the
    comparison is kept (ALLOW_MIXED)."""
    line = f"{what} {f'{verb} anyway (--allow_mixed)' if ALLOW_MIXED else f'not {verb}'}{why}"
    if line not in MIXED:
        MIXED[line] = None
        print(line, file=sys.stderr, flush=True)
    return ALLOW_MIXED


def curve_field(d, f):
    """What a run's periodic curve was measured with, one field: "tags" (the FID tags its log's names carry, in
    order: load_curve), else its record's fingerprint field (measured_with); None where it says nothing."""
    if f == "tags":
        return " then ".join(d.get("fid_tags") or []) or None
    return (d.get("fp") or {}).get(f)


def curve_alike(ds, base, key="bpd", name="", base_name=""):
    """The seeds of `ds` whose periodic `key` curve ("bpd": the data; "fid": the data, the periodic FID's network
    and the tag its log names it with, a latent model's decoder, and for a record without a periodic hash the test
    split's FID probe, as unlike) was measured as the baseline's seeds `base`: those where the step to the baseline's
    final value is counted and the curves drawn. Each one left out is named in MIXED (ALLOW_MIXED: kept, named). None
    when the baseline's own seeds differ (its target would average two metrics; named too). A record without a hash
    is not refused on it."""
    fields = ("data",) if key == "bpd" else ("data", "periodic", "tags", "decoder")
    what = f"periodic {'bound' if key == 'bpd' else 'FID'} curve"
    ref = {}
    for f in fields:
        seen = sorted({curve_field(d, f) for d in base} - {None})
        if len(seen) > 1 and not left_out(f"{base_name}'s {what}s", "averaged", f": {f} {'; '.join(seen)}"):
            return None
        ref[f] = seen[0] if len(seen) == 1 else None
    probes = [p for d in base if (p := curve_field(d, "probe")) is not None] if key == "fid" else []
    base_probe = probes[0] if probes else None
    if probes and two_networks(min(probes), max(probes)):  # two networks among the baseline's
        if not ref["periodic"] and not left_out(
            f"{base_name}'s {what}s", "averaged", f": the test split's FID {min(probes):.5f} to {max(probes):.5f}"
        ):
            return None
        base_probe = None

    def why(d):
        for f in fields:
            v = curve_field(d, f)
            if v and ref[f] and v != ref[f]:
                return f"{f} {v} against {ref[f]}"
        p = curve_field(d, "probe")
        hashed = key == "bpd" or (curve_field(d, "periodic") and ref["periodic"])  # else: compare the probes
        if not hashed and p is not None and base_probe is not None and two_networks(p, base_probe):
            return f"feature network: the test split's FID is {p:.5f} against {base_probe:.5f}"
        return None

    out = []
    for i, d in enumerate(ds):
        w = why(d)
        if w and not left_out(f"{name} seed {d.get('seed', i)}: its {what}", "compared", f" with {base_name}'s: {w}"):
            continue
        out.append(d)
    return out


def steps_to(ds, target, key="bpd", of=None):
    """Two table cells for one run's seeds: the mean step at which `key` first reaches target, with how many seeds
    reached it ("- (0/n)" when none did), and the mean training seconds to it ("-" when none did); "mixed" when the
    target averages seeds not measured alike (ds None: curve_alike). `of`: the run's seeds before curve_alike, when
    it left some out (said in the cell)."""
    if ds is None:
        return "mixed", "mixed"
    ok = [h for h in (reach(d, target, key) for d in ds) if h]
    count = f"{len(ok)}/{len(ds)}" + (f", {of - len(ds)} not alike" if of is not None and of > len(ds) else "")
    if not ok:
        return f"- ({count})", "-"
    return f"{np.mean([h[0] for h in ok]):.0f} ({count})", f"{np.mean([h[1] for h in ok]):.0f}"


def ms(values, fmt):
    v = np.array([x for x in values if x is not None], np.float64)
    if len(v) == 0:
        return "-"
    return fmt.format(v.mean()) + (" ± " + fmt.format(v.std(ddof=1)) if len(v) > 1 else "")


ALPHA, POWER = 0.05, 0.80  # two-sided level of the paired t test and the power the minimum detectable difference is at
BASE = "uniform"  # the run every other is paired with (--baseline)
DETECT_BPD = 0.05  # bits/dim: the paired difference the seed count is sized to detect (--detect)
DETECT_FRACTION = 0.10  # FID and KID (--size_from only): a difference of this fraction of uniform's mean
MAX_SEEDS = 100_000  # seeds_needed gives up beyond this
METRICS = (("final_bpd", "bits/dim", 3), ("fid_final", "FID", 3), ("kid_final", "KID", 4))  # key, name, decimals


FID_PROBE_RTOL = 1e-4  # test split FIDs this close are one feature space (two networks: 5e-4 to 5e-2 apart)
RIVALS = ("adaptive_noise",)  # --rivals: runs every other is also paired with, under the table
ALLOW_MIXED = False  # --allow_mixed: pair runs measured with different data or feature networks, and say so
MIXED = {}  # the pairs refused (or, with ALLOW_MIXED, kept) and why: {line: None}, in the order met


def unlike(a: dict, b: dict, key: str) -> str | None:
    """Why runs a and b (load's dicts) were not measured alike for metric `key`, or None. Bits/dim compare when the
    data agree; FID and KID when the feature networks and their references agree too. A record without a hash is
    not refused on it (the table says it was not fingerprinted), but two FIDs whose test split probes differ were
    measured with two feature networks."""
    fa, fb = a.get("fp") or {}, b.get("fp") or {}
    for what in ("data",) if key == "final_bpd" else ("data", "features", "decoder"):
        if fa.get(what) and fb.get(what) and fa[what] != fb[what]:
            return f"{what} {fa[what]} against {fb[what]}"
    if key != "final_bpd" and not (fa.get("features") and fb.get("features")):
        p, q = fa.get("probe"), fb.get("probe")
        if p is not None and q is not None and two_networks(p, q):
            return f"feature network: the test split's FID is {p:.5f} against {q:.5f} (not fingerprinted)"
    return None


def two_networks(p: float, q: float) -> bool:
    """Whether two test split FIDs against one reference (probes) were measured with two feature networks."""
    return abs(p - q) > FID_PROBE_RTOL * max(abs(p), abs(q))


def mixed_mark(ds, key) -> str:
    """ " (mixed)" after a mean ± sd over one run's seeds when they were not all measured alike for `key` (unlike):
    that mean averages two metrics; the paired columns leave such pairs out."""
    ds = [d for d in ds if d.get(key) is not None]
    return " (mixed)" if any(unlike(a, b, key) for a in ds for b in ds) else ""


def differences(results, name, key, base=None):
    """The per-seed paired differences d = run - base of `key` over the seeds where both have a value and were
    measured alike (unlike); a pair that was not is left out (ALLOW_MIXED: kept) and named in MIXED."""
    base = base or BASE
    out = []
    for i, (d, u) in enumerate(zip(results[name], results[base])):
        if d.get(key) is None or u.get(key) is None:
            continue
        why = unlike(d, u, key)
        if why:
            what = f"{name} seed {d.get('seed', i)} and {base} seed {u.get('seed', i)}: " + (
                "bits/dim" if key == "final_bpd" else "FID and KID"
            )
            if not left_out(what, "paired", f": {why}"):
                continue
        out.append(d[key] - u[key])
    return np.array(out, np.float64)


def fingerprint_note(results) -> list:
    """The lines under a table on what its runs were measured with: the data and feature-network hashes among
    them, the runs that predate fingerprints, and every pair left out (or kept with --allow_mixed) and why."""
    ds = [d for ds in results.values() for d in ds]
    lines = ["", "Measured with (content hashes, core/fingerprint.py):"]
    has_fid = any(d.get("fid_final") is not None for d in ds)
    kinds = [("data", "data")] + [("features", "FID feature network")] * has_fid
    kinds += [("decoder", "decoder of the samples")] * any(d.get("fp", {}).get("decoder") for d in ds)
    kinds += [("periodic", "periodic FID's network")] * any(d.get("fp", {}).get("periodic") for d in ds)
    for what, label in kinds:
        seen = sorted({d.get("fp", {}).get(what) for d in ds} - {None})
        missing = sum(1 for d in ds if not d.get("fp", {}).get(what))
        text = "; ".join(seen) if seen else "none"
        if missing:
            text += f"; {missing} of {len(ds)} runs with no hash in their record (not fingerprinted)"
        lines.append(f"- {label}: {text}.")
    probes = sorted({round(p, 5) for d in ds if (p := d.get("fp", {}).get("probe")) is not None})
    if probes:
        lines.append(
            f"- the test split's own FID (one value per feature space): {', '.join(f'{p:.5f}' for p in probes)}."
        )
    if MIXED:
        what = "kept with --allow_mixed" if ALLOW_MIXED else "left out of their comparison"
        lines += ["", f"Not measured alike, {what}:", ""] + [f"- {line}." for line in MIXED]
    return lines


def mdd(sd, n, alpha=ALPHA, power=POWER):
    """The minimum detectable difference of a paired t test on n pairs with differences of sample standard deviation
    sd: (t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n), the t quantiles with n - 1 degrees of freedom. This is the
    common approximation (e.g. Zar, Biostatistical Analysis, the one-sample t test's "minimum detectable
    difference"): the normal-theory formula (z_{1-alpha/2} + z_{power}) sd / sqrt(n) with t quantiles in place of z
    for an estimated sd, and the opposite tail of the two-sided test ignored. At small n it claims more power than
    the test has (mdd_exact: at n = 2 the power at this difference is 0.73, at n = 5 0.79, from n = 20 on 0.80). NaN
    for n < 2 (no spread)."""
    from scipy import stats

    if n < 2:
        return float("nan")
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n))


def t_test_power(delta, sd, n, alpha=ALPHA):
    """Exact power of the two-sided paired t test at level alpha for a true mean difference delta: the statistic is
    noncentral t with n - 1 degrees of freedom and noncentrality delta sqrt(n) / sd (scipy.stats.nct), rejected
    beyond +- t_{1-alpha/2, n-1}. (scipy's lower tail is NaN at 1 degree of freedom and a large noncentrality, where
    it is below 1e-15: taken as 0.)"""
    from scipy import stats

    df, crit = n - 1, stats.t.ppf(1 - alpha / 2, n - 1)
    nc = abs(delta) * np.sqrt(n) / sd
    return float(stats.nct.sf(crit, df, nc) + np.nan_to_num(stats.nct.cdf(-crit, df, nc)))


def mdd_exact(sd, n, alpha=ALPHA, power=POWER):
    """The difference at which t_test_power is exactly `power` (root of the noncentral-t power, scipy brentq): the
    exact counterpart of mdd. Above mdd at small n, where the approximation's power falls short of `power` (0.73 at
    n = 2, 0.79 at n = 5, at 0.05 / 0.8); from about n = 20 on within 0.1% of it (its power there is 0.8002)."""
    from scipy import optimize

    if n < 2:
        return float("nan")
    if sd == 0:
        return 0.0
    approx = mdd(sd, n, alpha, power)
    hi = approx
    while t_test_power(hi, sd, n, alpha) < power:
        hi *= 1.25
    return float(optimize.brentq(lambda d: t_test_power(d, sd, n, alpha) - power, 0.5 * approx, hi, xtol=1e-12 * hi))


def seeds_needed(sd, delta, alpha=ALPHA, power=POWER, max_n=MAX_SEEDS):
    """The smallest n >= 2 with mdd(sd, n) <= |delta|: the seeds a paired benchmark needs to detect a difference
    delta at this level and power, if the paired differences' sd is the one observed (a pilot's sd is itself
    uncertain: with 3 seeds the 95% interval of the true sd is 0.52x to 6.3x the observed one). None beyond max_n."""
    from scipy import stats

    if sd == 0:
        return 2
    delta = abs(delta)
    # mdd(sd, n) decreases in n and exceeds its normal-quantile limit (z_{1-alpha/2} + z_power) sd / sqrt(n): start
    # below the answer from that limit, then a step at a time
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    n = max(2, int(np.floor((z * sd / delta) ** 2)))
    while mdd(sd, n, alpha, power) > delta:
        n += 1
        if n > max_n:
            return None
    return n


def paired(diff, decimals=3):
    """'mean [lo, hi], MDD m' of paired differences (95% Student-t interval with n - 1 degrees of freedom; m =
    mdd), '+x' for one pair, '-' for none."""
    from scipy import stats

    if len(diff) == 0:
        return "-"
    if len(diff) == 1:
        return _g(diff[0], True, decimals)
    sd = diff.std(ddof=1)
    half = stats.t.ppf(1 - ALPHA / 2, len(diff) - 1) * sd / np.sqrt(len(diff))
    m, k = diff.mean(), decimals
    return (
        f"{_g(m, True, k)} [{_g(m - half, True, k)}, {_g(m + half, True, k)}], MDD {_g(mdd(sd, len(diff)), False, k)}"
    )


def _g(x, sign=False, decimals=3):
    """A number with `decimals` decimals (3 for bits/dim and FID, 4 for KID, as the table's columns)."""
    return f"{x:{'+' if sign else ''}.{decimals}f}"


def verdict(name, diff, what, decimals=3):
    """One sentence on a run's paired differences of `what`: separated when the 95% interval excludes 0, else the
    minimum detectable difference the table had."""
    from scipy import stats

    n = len(diff)
    if n < 2:
        return f"{what}: {n} pair(s), no interval"
    sd = diff.std(ddof=1)
    half = stats.t.ppf(1 - ALPHA / 2, n - 1) * sd / np.sqrt(n)
    m = diff.mean()
    if m - half > 0 or m + half < 0:
        return f"{what}: {name} is {'higher' if m > 0 else 'lower'} than {BASE} (95% interval excludes 0)"
    return f"{what}: not separated: the table could have detected |d| >= {_g(mdd(sd, n), False, decimals)}"


def seeds_cell(diff, delta):
    """The seeds_needed for a difference delta at the observed sd of diff, as a table cell."""
    if len(diff) < 2:
        return "-"
    n = seeds_needed(diff.std(ddof=1), delta)
    return f"> {MAX_SEEDS}" if n is None else str(n)


def at_wall_clock(d, seconds):
    """The periodic bound estimate at the last evaluation within `seconds` of training, or None."""
    ok = np.nonzero(d["train_s"] <= seconds)[0]
    return None if len(ok) == 0 else float(d["bpd"][ok[-1]])


def table(results, runs, seeds, config, detect=DETECT_BPD):
    target = float(np.mean([d["bpd"][-1] for d in results[BASE]]))
    budget = float(np.mean([d["total_s"] for d in results[BASE]]))
    some = results[BASE][0]
    every = int(some["steps"][1] - some["steps"][0]) if len(some["steps"]) > 1 else "-"
    from core.fingerprint import without_paths

    cmd = without_paths("python benchmarks/samplers.py " + " ".join(sys.argv[1:]))  # no path of this machine
    lines = [
        f"`{cmd}`",
        "",
        f"Config {config}, {len(seeds)} seed(s) ({', '.join(map(str, seeds))}) per run, "
        f"{int(some['steps'][-1])} steps each; mean ± sd over seeds; paired differences to {BASE}: mean "
        f"[95% interval] over seeds, and the minimum detectable difference (MDD: two-sided {ALPHA:g}, "
        f"{POWER:.0%} power, from the observed sd of the differences; seeds: how many would detect "
        f"{detect:g} bits/dim at that sd).",
        "",
        f"| run | final test bits/dim | FID | KID | steps to {BASE}'s final {some['bpd_key'].split('/')[1]} "
        f"({target:.3f}) | wall-clock to it (s) | train wall-clock (s) | {some['bpd_key'].split('/')[1]} at "
        f"{BASE}'s wall-clock ({budget:.0f} s) | Δ bits/dim vs {BASE} | Δ FID | Δ KID | "
        f"seeds for {detect:g} bits/dim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fid_key = some["fid_key"]
    if fid_key:  # steps to the baseline's final periodic FID, beside the bound's (the column before the wall-clock)
        fid_target = float(np.mean([d["fid"][-1] for d in results[BASE]]))
        name = fid_key.split("/")[1]
        head = f" | steps to {BASE}'s final {name} ({fid_target:.3f}) | train wall-clock"
        lines[-2] = lines[-2].replace(" | train wall-clock", head)
        lines[-1] += "---|"
    rows = []
    for name, _, _ in runs:
        ds = results[name]
        on_data = curve_alike(ds, results[BASE], "bpd", name, BASE)
        reached, wall = steps_to(on_data, target, of=len(ds))
        if fid_key:
            wall += f" | {steps_to(curve_alike(ds, results[BASE], 'fid', name, BASE), fid_target, 'fid', len(ds))[0]}"
        rows.append(
            f"| {name} | {ms([d['final_bpd'] for d in ds], '{:.3f}')}{mixed_mark(ds, 'final_bpd')} | "
            f"{ms([d['fid_final'] for d in ds], '{:.3f}')}{mixed_mark(ds, 'fid_final')} | "
            f"{ms([d['kid_final'] for d in ds], '{:.4f}')}{mixed_mark(ds, 'kid_final')} | "
            f"{reached} | {wall} | {ms([d['total_s'] for d in ds], '{:.0f}')} | "
            f"{'mixed' if on_data is None else ms([at_wall_clock(d, budget) for d in on_data], '{:.3f}')} | "
            + " | ".join("-" if name == BASE else paired(differences(results, name, k), dec) for k, _, dec in METRICS)
            + f" | {'-' if name == BASE else seeds_cell(differences(results, name, 'final_bpd'), detect)} |"
        )
    metrics = [m for m in METRICS if any(d[m[0]] is not None for ds in results.values() for d in ds)]  # text: no FID
    if len(metrics) == 1:  # no run has an FID (text): its columns go, found by their headers
        heads = [c.strip() for c in lines[-2].strip().strip("|").split("|")]
        drop = [i for i, h in enumerate(heads) if h in ("FID", "KID", "Δ FID", "Δ KID") or "fid_N" in h]
        lines[-2:] = [without_columns(line, drop) for line in lines[-2:]]
        rows = [without_columns(row, drop) for row in rows]
    lines += rows
    if any(" (mixed)" in row for row in rows):
        lines += ["", "(mixed): a mean over seeds measured with different data or feature networks (listed below)."]
    lines += ["", f"Verdicts (paired differences d = run - {BASE}; 95% intervals; MDD as above):", ""]
    for name, _, _ in runs:
        if name != BASE:
            lines.append(
                f"- {name}: "
                + "; ".join(verdict(name, differences(results, name, k), what, dec) for k, what, dec in metrics)
                + "."
            )
    lines += worse_and_rival(results, runs)
    ev = some["eval"]
    fid, bound = ev.get("fid", {}), ev["nll_bpd"]["protocol"]
    fp = fid.get("protocol", {})
    scored = (
        f"FID/KID: {fp.get('samples')} samples, {fp.get('method')} {fp.get('steps')} steps, "
        f"{fp.get('features')}; reference {fp.get('reference')}; the test split itself scores FID "
        f"{fid.get('test_split', {}).get('fid', float('nan')):.3f}. "
        if fp
        else ""
    )
    curves = f"{some['bpd_key']}, {some['fid_key']}" if fp else some["bpd_key"]
    lines += [
        "",
        f"Bits/dim: {bound['bound']}, {bound['images']} test {'sequences' if 'units' in bound else 'images'}. "
        f"{scored}Curves: periodic evaluation ({curves}) every {every} steps.",
    ]
    lines += fingerprint_note(results)
    note = sequence_note(results)
    if note:
        lines += ["", note]
    note = estimate_note(results)
    if note:
        lines += ["", note]
    note = compute_note(results)
    if note:
        lines += ["", note]
    return in_unit("\n".join(lines), bound_unit(ev))


def without_columns(row: str, drop) -> str:
    """A markdown table row without the cells at the indices in `drop` (0: the first cell)."""
    cells = row.strip().strip("|").split("|")
    return "|" + "|".join(c for i, c in enumerate(cells) if i not in drop) + "|"


def sequence_note(results):
    """The line under the table for a process on tokens, whose final value is an estimate over test sequences and
    times (drivers/evaluate.py): its largest and mean standard error, and that the arms of a seed share sequences,
    times and masks (the evaluation's key is the seed's). None for other processes."""
    bounds = [d["eval"]["nll_bpd"] for ds in results.values() for d in ds]
    if "units" not in bounds[0]["protocol"] or any(b.get("stderr") is None for b in bounds):
        return None
    se = np.array([b["stderr"] for b in bounds])
    return (
        f"Each final value is estimated from {bounds[0]['protocol']['images']} test sequences; its standard error "
        f"(over sequences) at most {se.max():.4f} bits/dim, mean {se.mean():.4f}. The runs of one seed are scored on "
        "the same sequences, times and masks (the evaluation's key is the seed's), so the paired differences "
        "carry less of that noise than the standard errors suggest."
    )


def beside_section(results, outs):
    """--beside OUT (repeatable): every finished run of another benchmark read beside this table (the masked LM's
    autoregressive baseline): its final value, mean ± sd over its seeds, with its protocol, and its paired
    difference from this table's BASE on the seeds both have, measured alike (unlike)."""
    lines = []
    base = {d["seed"]: d for d in results[BASE]}
    for out in outs:
        for name, by_seed in sorted(finished_runs(out).items()):
            got = {seed: final_metrics(wd) for seed, wd in sorted(by_seed.items())}
            vals = [g["final_bpd"] for g in got.values()]
            shared, unalike = [], []
            for s in (s for s in got if s in base):
                why = unlike(got[s], base[s], "final_bpd")
                if why:  # named on the line, as every pair not measured alike is under the table
                    unalike.append(f"seed {s} {'kept with --allow_mixed' if ALLOW_MIXED else 'left out'}: {why}")
                if not why or ALLOW_MIXED:
                    shared.append(s)
            pairs = np.array([got[s]["final_bpd"] - base[s]["final_bpd"] for s in shared])
            proto = next(iter(got.values()))["protocol"]
            lines.append(
                f"- {name} in {os.path.basename(os.path.normpath(out))} (seeds {', '.join(map(str, got))}): "
                f"{ms(vals, '{:.3f}')} bits/dim ({proto}); d = it - {BASE}: {paired(pairs)} over "
                f"{len(pairs)} shared seed(s)" + "".join(f"; {u}" for u in unalike) + "."
            )
    return ["", "Beside the table (--beside):", ""] + lines if lines else []


def samples_section(results, runs, out, per_run=2):
    """A process on tokens: the first `per_run` text samples of each run's final evaluation, on the first seed of
    the table (its eval JSON's samples file, kept in the records). [] when the runs have no text samples."""
    lines = []
    for name, _, _ in runs:
        d = results[name][0]
        rel = d["eval"].get("samples", {}).get("path", "")
        path = os.path.join(workdir_of(out, name, d["seed"]), rel)
        if not rel.endswith(".txt") or not os.path.exists(path):
            continue
        with open(path) as f:
            text = f.read().splitlines()[:per_run]
        lines += [f"- {name}:"] + [f"  `{t}`" for t in text]
    if not lines:
        return []
    seed = results[runs[0][0]][0]["seed"]
    return ["", f"Text samples of the final evaluation (seed {seed}, the first {per_run} of each run):", ""] + lines


def compute_note(results):
    """The line on the table's compute: the runs' summed wall-clock and the share of it spent evaluating, the final
    evaluation (the eval process) and the periodic ones (periodic/seconds, inside the train process). "" when no run
    has its wall-clock."""
    ds = [d for ds in results.values() for d in ds]
    total = sum(d["bench_s"] for d in ds)
    if not total:
        return ""
    final = sum(d["eval_s"] for d in ds) / total
    periodic = sum(d["periodic_s"] for d in ds) / total
    return (
        f"Compute: the runs' wall-clock (train and eval, bench_seconds.json) sums to {total / 3600:.2f} h "
        "(with --jobs=N the benchmark's elapsed time is about 1/N of it); evaluation "
        f"{100 * (final + periodic):.1f}% of it: the final evaluation {100 * final:.1f}%, the periodic ones "
        f"{100 * periodic:.1f}%."
    )


def worse_and_rival(results, runs):
    """Lines under the verdicts: per run, the seeds whose final test bits/dim is above uniform's (a collapse shows
    here); then, per rival of RIVALS among the runs (--rivals: the adaptive noise schedule, the simple rival to beat,
    by default; the best fixed distribution of a grid gives each run's regret against it), every other run paired
    against it on bits/dim and FID."""
    worse = [
        f"{name} {int(np.sum(d > 0))}/{len(d)}"
        for name, _, _ in runs
        if name != BASE and len(d := differences(results, name, "final_bpd"))
    ]
    lines = ["", f"Seeds whose final test bits/dim is higher than {BASE}'s (worse): " + ", ".join(worse) + "."]
    for rival in RIVALS:
        if rival not in results or rival == BASE:
            continue
        lines += ["", f"Against {rival} (d = run - {rival}, same seeds):", ""]
        for name, _, _ in runs:
            if name not in (BASE, rival):
                d = differences(results, name, "final_bpd", rival)
                f = differences(results, name, "fid_final", rival)
                lines.append(
                    f"- {name}: Δ bits/dim {paired(d)}; higher in {int(np.sum(d > 0))}/{len(d)} seeds"
                    + (f"; Δ FID {paired(f)}." if len(f) else ".")  # text: no FID
                )
    return lines


def estimate_note(results):
    """The line under the table when final bits/dim are the stratified estimate (--bound_strata): how many, its
    largest standard error about the full bound, and whether that is at most a quarter of the table's smallest
    bits/dim MDD (the rule for using it,
    docs/benchmarks/measurement.md#the-bound-estimate-in-the-tables-2026-12-04). None when every run has the full
    bound."""
    bounds = [d["eval"]["nll_bpd"] for ds in results.values() for d in ds]
    est = [b for b in bounds if "estimate_stderr" in b]
    if not est:
        return None
    se = np.array([b["estimate_stderr"] for b in est])
    kinds = sorted(
        {(b["protocol"]["strata"], b["protocol"]["per_stratum"], b["protocol"]["decoder_draws"]) for b in est}
    )
    mdds = [
        mdd(d.std(ddof=1), len(d))
        for d in (differences(results, name, "final_bpd") for name in results if name != BASE)
        if len(d) > 1
    ]
    text = (
        f"Final bits/dim of {len(est)} of {len(bounds)} runs are the stratified estimate of the bound ("
        + ", ".join(f"{k} strata x {m}, decoder x {d}" for k, m, d in kinds)
        + f"; {est[0]['protocol']['bound']}): standard error about the full bound at most {se.max():.4f} bits/dim "
        f"(mean {se.mean():.4f})" + ("" if len(est) == len(bounds) else "; the other runs' are the full bound")
    )
    if not mdds:
        return text + "."
    quarter = min(mdds) / 4
    return text + (
        f", within a quarter of the table's smallest bits/dim MDD, {quarter:.4f}."
        if se.max() <= quarter
        else f", ABOVE a quarter of the table's smallest bits/dim MDD, {quarter:.4f}: evaluate with more strata "
        "(--bound_strata) or the full bound (0)."
    )


def finished_runs(out):
    """{run name: {seed: workdir}} of the finished runs (eval JSON written) in a benchmark's OUT; the name is read
    back from the workdir's (workdir_of: / as __, = as -)."""
    found = {}
    for entry in sorted(os.listdir(out)):
        stem, sep, seed = entry.rpartition("_seed")
        wd = os.path.join(out, entry)
        if not (sep and seed.isdigit() and finished(wd)):
            continue
        spec, *settings = stem.split("__")
        name = "/".join([spec] + [x.replace("-", "=", 1) for x in settings])
        found.setdefault(name, {})[int(seed)] = wd
    return found


def final_metrics(wd):
    """The final test bits/dim, FID and KID of a finished run (its last --mode=eval JSON)."""
    evals = sorted(f for f in os.listdir(os.path.join(wd, "eval")) if f.startswith("step_") and f.endswith(".json"))
    with open(os.path.join(wd, "eval", evals[-1])) as f:
        ev = json.load(f)
    fid = ev.get("fid", {})
    return dict(
        final_bpd=ev["nll_bpd"]["value"],
        fid_final=fid.get("fid"),
        kid_final=fid.get("kid"),
        fp=measured_with(wd, ev),
        unit=bound_unit(ev),
        protocol=ev["nll_bpd"].get("protocol", {}).get("bound", ""),
    )


def sizing(out, detect=DETECT_BPD, fraction=DETECT_FRACTION):
    """--size_from: per finished run of a pilot benchmark in `out`, the paired differences to uniform over the seeds
    both finished and were measured alike (unlike), their sd, the MDD (approximate and exact, mdd / mdd_exact) and
    the seeds that would detect `detect` bits/dim, and for FID and KID a difference of `fraction` of uniform's mean
    over those seeds. Returns the text."""
    found = finished_runs(out)
    if BASE not in found:
        sys.exit(f"error: --size_from: no finished {BASE} run in {out} (OUT/{BASE}_seedS/eval/step_*.json)")
    uni = {seed: final_metrics(wd) for seed, wd in found[BASE].items()}
    lines = [
        f"Sizing from {out}: paired differences d = run - {BASE} over the seeds both finished; MDD at two-sided "
        f"{ALPHA:g} and {POWER:.0%} power, (t_{{1-a/2,n-1}} + t_{{power,n-1}}) sd_d / sqrt(n), and exactly "
        f"(noncentral t); seeds: the smallest n whose MDD at the observed sd_d is at most the target ({detect:g} "
        f"bits/dim; FID and KID {fraction:.0%} of {BASE}'s mean).",
        "",
        "| run | n | metric | mean d | sd_d | MDD | MDD (exact) | target | seeds needed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, seeds in found.items():
        if name == BASE:
            continue
        common = sorted(set(seeds) & set(uni))
        runs = {seed: final_metrics(seeds[seed]) for seed in common}
        for key, what, k in METRICS:
            ok = [s for s in common if runs[s][key] is not None and uni[s][key] is not None]
            for s in [s for s in ok if unlike(runs[s], uni[s], key)]:
                print(
                    f"{name} seed {s} and {BASE} seed {s}: {what} not paired: {unlike(runs[s], uni[s], key)}",
                    file=sys.stderr,
                )
                ok.remove(s)
            if not ok and key != "final_bpd":  # no FID or KID (text): no row
                continue
            d = np.array([runs[s][key] - uni[s][key] for s in ok], np.float64)
            if len(d) < 2:
                lines.append(f"| {name} | {len(d)} | {what} | - | - | - | - | - | - (needs 2 pairs) |")
                continue
            sd = d.std(ddof=1)
            target = detect if key == "final_bpd" else fraction * float(np.mean([uni[s][key] for s in ok]))
            n = seeds_needed(sd, target)
            lines.append(
                f"| {name} | {len(d)} | {what} | {_g(d.mean(), True, k)} | {_g(sd, False, k)} | "
                f"{_g(mdd(sd, len(d)), False, k)} | {_g(mdd_exact(sd, len(d)), False, k)} | {_g(target, False, k)} | "
                f"{f'> {MAX_SEEDS}' if n is None else n} |"
            )
    return in_unit("\n".join(lines), next(iter(uni.values()))["unit"])


def density_summary(density):
    """(mean u, total variation from uniform) of the policy's mean density over B equal bins of normalised t (u =
    t / T on the DDPM chain, u = t in continuous time; samplers/policy.py bins_mass): density [..., B] of bin
    masses, normalised to sum to 1. Mean u = sum_b p_b (b + 1/2) / B (bin centres: within 1 / (2B) of the mean of the
    density itself); TV = 1/2 sum_b |p_b - 1/B|, in [0, 1 - 1/B] (0: uniform; uniform over timesteps gives exactly
    1/B per bin when B divides T, as the default 50 bins of 1,000 timesteps do; the Beta(1, 1) policy on the DDPM
    chain sits at TV 0.001, its first and last timesteps getting half a rounding bin of u each)."""
    p = np.asarray(density, np.float64)
    p = p / np.maximum(p.sum(-1, keepdims=True), 1e-30)
    B = p.shape[-1]
    centres = (np.arange(B) + 0.5) / B
    return p @ centres, 0.5 * np.abs(p - 1.0 / B).sum(-1)


def policy_track(wd):
    """The learned sampler's policy over training from a run's metrics.jsonl: steps, mean u and TV distance from
    uniform of the mean density (density_summary of sampler/policy_density), and the spread across images
    (sampler/policy_spread: the sum over bins of the std across the batch's images of p(bin), over the mean's mass).
    Each record holds the density of the last policy update (every update_every steps) as of its step. None when the
    run logged no policy density (not the learned sampler)."""
    from training.report import POLICY_DENSITY, read_metrics

    rows = [r for r in read_metrics(os.path.join(wd, "metrics.jsonl")) if POLICY_DENSITY in r]
    if not rows:
        return None
    mean_u, tv = density_summary(np.array([r[POLICY_DENSITY] for r in rows], np.float64))
    return dict(
        steps=np.array([r["step"] for r in rows]),
        mean_u=mean_u,
        tv=tv,
        spread=np.array([r.get("sampler/policy_spread", np.nan) for r in rows], np.float64),
    )


def trajectory(ts, quarters=4):
    """The policy's path, not only its end: mean u and TV from uniform at each quarter of the run (the last record at
    or before step k * last / quarters), mean over seeds, and each seed's largest TV over the run with its step (a
    policy that moved and came back ends at uniform, as one that never moved does)."""
    last = min(int(tr["steps"][-1]) for tr in ts)
    at = [last * k // quarters for k in range(1, quarters + 1)]
    cells = []
    for step in at:
        idx = [np.searchsorted(tr["steps"], step, side="right") - 1 for tr in ts]
        u = np.mean([tr["mean_u"][i] if i >= 0 else np.nan for tr, i in zip(ts, idx)])
        tv = np.mean([tr["tv"][i] if i >= 0 else np.nan for tr, i in zip(ts, idx)])
        cells.append(f"{step}: {u:.2f} / {tv:.3f}")
    peaks = [f"{tr['tv'].max():.2f} (step {int(tr['steps'][np.argmax(tr['tv'])])})" for tr in ts]
    return (
        "path, mean u / TV (mean over seeds) at step "
        + ", ".join(cells)
        + "; largest TV per seed: "
        + ", ".join(peaks)
        + "."
    )


def walk_and_gain(ts, gains):
    """Does where the policy went decide what it gained? Across seeds, each run's average of the policy's mean u over
    its updates (below 0.5: it spent the run tilted toward low noise) against the seed's paired Δ final bits/dim
    (gains, aligned with ts; None where a seed has no value): Pearson's r, with the pairs. A policy that learned
    would go the same way in every seed; a walk without signal goes a different way in each, and if the bound then
    follows the direction, r is large while the walk's mean gain is not."""
    pairs = [(float(np.mean(tr["mean_u"])), g) for tr, g in zip(ts, gains) if g is not None]
    text = f"average mean u over the run / Δ bits/dim vs {BASE} per seed: " + ", ".join(
        f"{u:.2f} / {g:+.3f}" for u, g in pairs
    )
    if len(pairs) < 3:
        return text + "."
    u, g = np.array(pairs).T
    r = np.corrcoef(u, g)[0, 1] if u.std() > 0 and g.std() > 0 else float("nan")
    return f"{text}; Pearson r = {r:.2f} ({len(g)} seeds)."


def policy_section(tracks, path, gains=None):
    """Does the policy move? tracks: {run: [policy_track per seed]} of the learned sampler's runs. Writes the figure
    (three panels against the training step: mean u, TV from uniform, spread across images; one line per seed, a
    colour per run) to `path` and returns the markdown: a line per run with the final values, mean ± sd over seeds,
    and the per-seed values."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 4))
    axes = fig.subplots(1, 3)
    panels = (
        ("mean_u", "mean u of the mean density (0.5: uniform)"),
        ("tv", "TV distance from uniform"),
        ("spread", "spread across images"),
    )
    lines = [
        "Does the policy move? The learned sampler's mean density over t (sampler/policy_density, the policy's mean "
        "probability per bin of normalised t u at its last update): its mean u (uniform: 0.5) and total variation "
        "distance from uniform (1/2 sum_b |p_b - 1/B|; 0: uniform), and the spread of p(t) across images "
        "(sampler/policy_spread; 0: every image the same density); final values, mean ± sd over seeds [per seed].",
        "",
        f"![the policy over training]({os.path.basename(path)})",
        "",
    ]
    for i, (name, ts) in enumerate(tracks.items()):
        colour = f"C{i % 10}"
        for j, tr in enumerate(ts):
            for ax, (key, _) in zip(axes, panels):
                # a record holds the density of the last update: constant until the next one
                ax.plot(
                    tr["steps"],
                    tr[key],
                    color=colour,
                    alpha=0.8,
                    lw=1,
                    drawstyle="steps-post",
                    label=name if j == 0 else None,
                )
        finals = []
        for key, what in (("mean_u", "mean u"), ("tv", "TV from uniform"), ("spread", "spread")):
            v = np.array([tr[key][-1] for tr in ts])
            finals.append(f"{what} {ms(v, '{:.3f}')} [{', '.join(f'{x:.3f}' for x in v)}]")
        lines.append(f"- {name} ({len(ts)} seed(s), step {int(ts[0]['steps'][-1])}): final " + "; ".join(finals) + ".")
        lines.append("  " + trajectory(ts))
        if gains and name in gains:
            lines.append("  " + walk_and_gain(ts, gains[name]))
    axes[0].axhline(0.5, color="k", lw=0.5, ls="--")
    for ax, (_, title) in zip(axes, panels):
        ax.set_xlabel("training step")
        ax.set_title(title)
    handles, labels = axes[0].get_legend_handles_labels()  # one legend under the panels, clear of the lines
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 2), fontsize=8, frameon=False)
    fig.suptitle("the learned sampler's policy over training (one line per seed)")
    fig.tight_layout(rect=(0, 0.04 + 0.04 * ((len(labels) + 1) // 2), 1, 1))
    fig.savefig(path, dpi=100)
    return "\n".join(lines)


def plot(results, runs, path):
    from matplotlib.figure import Figure

    some = results[BASE][0]
    panels = ("bpd", "fid") if some["fid"] is not None else ("bpd",)  # text: no FID
    fig = Figure(figsize=(5.5 * len(panels), 4))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for name, _, _ in runs:
        for ax, k in zip(axes, panels):
            ds = curve_alike(results[name], results[BASE], k, name, BASE)  # seeds measured as the baseline's
            mixed = ds is None
            ds = results[name] if mixed else ds
            if not ds or ds[0][k] is None:
                continue
            steps = ds[0]["steps"]
            v = np.array([d[k] for d in ds])
            (line,) = ax.plot(steps, v.mean(0), label=name + " (mixed)" * mixed)
            if len(ds) > 1:
                ax.fill_between(steps, v.min(0), v.max(0), color=line.get_color(), alpha=0.2)
    axes[0].set_ylabel(f"{some['bpd_key']} ({bound_unit(some['eval'])})")
    if len(axes) > 1:
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
    ap.add_argument(
        "--baseline",
        default="uniform",
        help="the run (one of --runs) every other is paired with: uniform, or e.g. lognormal for EDM's own density",
    )
    ap.add_argument(
        "--rivals",
        default="adaptive_noise",
        help="runs every other is also paired with under the table (comma-separated; those not among --runs are "
        "skipped), e.g. the best fixed distribution of a grid for each run's regret against it",
    )
    ap.add_argument("--every", type=int, default=250, help="periodic evaluation interval (steps)")
    ap.add_argument("--out", default=os.path.join(ROOT, "workdirs", "bench_samplers"))
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time, each on its own share of the cores")
    ap.add_argument("--horizon_of", default="", help="print where this run's bound estimate stops improving")
    ap.add_argument("--tol", type=float, default=0.01, help="bits/dim, for --horizon_of")
    ap.add_argument(
        "--size_from",
        default="",
        metavar="OUT",
        help="print, per run of the benchmark in OUT (a pilot), the sd of its paired differences and the seeds needed",
    )
    ap.add_argument(
        "--records",
        default="",
        metavar="DIR",
        help="keep each finished run's record (eval JSON, metrics, wall-clock) in DIR and take finished runs from it",
    )
    ap.add_argument("--detect", type=float, default=DETECT_BPD, help="bits/dim the seed counts are sized to detect")
    ap.add_argument(
        "--allow_mixed",
        action="store_true",
        help="pair runs measured with different data or FID feature networks (the table names them) rather than "
        "leave those pairs out",
    )
    ap.add_argument(
        "--bound_strata",
        type=int,
        default=0,
        metavar="K",
        help="final bits/dim from the bound's stratified estimate with K strata (config.eval.bound_strata; 0: the "
        "full bound)",
    )
    ap.add_argument(
        "--bound_per_stratum", type=int, default=2, metavar="M", help="draws per stratum with --bound_strata"
    )
    ap.add_argument(
        "--compilation_cache",
        default="",
        metavar="DIR",
        help="JAX's persistent compilation cache for every run (default OUT/jax_cache; off: none)",
    )
    ap.add_argument(
        "--beside",
        action="append",
        default=[],
        metavar="OUT",
        help="another benchmark's OUT whose finished runs are read beside the table, each paired with --baseline on "
        "shared seeds (repeatable), e.g. the masked LM's autoregressive baseline",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config override for every run, e.g. train.num_steps=500 (repeatable)",
    )
    args = ap.parse_args()
    global BASE, ALLOW_MIXED, RIVALS
    BASE, ALLOW_MIXED = args.baseline, args.allow_mixed
    RIVALS = tuple(r for r in args.rivals.split(",") if r)
    if args.horizon_of:
        return print_horizon(args.horizon_of, args.tol)
    if args.size_from:
        return print(sizing(args.size_from, args.detect))
    runs = parse_runs(args.runs)
    check_bound_flags(args)
    for out in args.beside:
        if not os.path.isdir(out):
            sys.exit(f"error: --beside={out}: no such folder (another benchmark's OUT, e.g. the AR baseline's)")
    seeds = [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out, exist_ok=True)
    os.environ.update(cache_env(args.compilation_cache, args.out))  # main.py's of every run inherit it
    if args.records:
        restored = restore_records(args.records, args.out)
        if restored:
            print(f"{len(restored)} finished run(s) taken from the records in {args.records}", flush=True)
    t0 = time.perf_counter()
    run_all(args.out, runs, seeds, args)
    results = {name: [dict(load(workdir_of(args.out, name, seed)), seed=seed) for seed in seeds] for name, _, _ in runs}
    md = table(results, runs, seeds, args.config, args.detect)
    unit = bound_unit(results[BASE][0]["eval"])
    extra = beside_section(results, args.beside) + samples_section(results, runs, args.out)
    md += in_unit("\n".join([""] + extra), unit) if extra else ""
    written = [f"{args.out}/samplers.md", f"{args.out}/samplers.png"]
    tracks = {
        name: [policy_track(workdir_of(args.out, name, seed)) for seed in seeds]
        for name, s, _ in runs
        if s == "adaptive"
    }
    tracks = {name: ts for name, ts in tracks.items() if all(t is not None for t in ts)}
    if tracks:
        gains = {
            name: [
                None
                if d["final_bpd"] is None or b["final_bpd"] is None or unlike(d, b, "final_bpd")
                else d["final_bpd"] - b["final_bpd"]
                for d, b in zip(results[name], results[BASE])
            ]
            for name in tracks
            if name != BASE
        }
        md += "\n\n" + in_unit(policy_section(tracks, os.path.join(args.out, "policy.png"), gains), unit)
        written.append(f"{args.out}/policy.png")
    with open(os.path.join(args.out, "samplers.md"), "w") as f:
        f.write(md + "\n")
    plot(results, runs, os.path.join(args.out, "samplers.png"))
    print(md)
    print(f"\nWritten: {', '.join(written)} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
