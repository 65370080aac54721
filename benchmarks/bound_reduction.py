"""The quantity the learned sampler optimises, measured directly: how much K training steps drawn from each sampler's
timestep distribution lower the test bound, from the same checkpoints of one uniform run.

    python benchmarks/bound_reduction.py --workdir=workdirs/bench_converged/uniform_seed0 \\
        --policy_workdir=workdirs/bench_converged/adaptive_seed0 --steps=1000,5000,10000 --k=20 --replicates=16

For every checkpoint step s (of the uniform run in --workdir: its parameters, Adam state and step), every run
(SAMPLER[+WEIGHTING][/FIELD=VALUE], as benchmarks/samplers.py names them) and every replicate r:

    theta_r = K train steps of that run's configuration from the checkpoint  (the train step itself: its timesteps,
              importance weights and loss weighting; the sampler's periodic update is not run, so its distribution
              is the one it has at s)
    reduction_r = bound(theta_s) - bound(theta_r)      (bits/dim, raw parameters, not the EMA)

Pairing: replicate r gives every run the same K batches (the data order of seed 1000 + r from step s on) and the same
per-step random key (so the same Gaussian noise and dropout masks; only the timesteps and the weights differ), and
every bound is computed with the same test images, timesteps and noise. Columns: the mean reduction over replicates
with a 95% interval (Student's t, n - 1 degrees of freedom), and the paired difference run - uniform with its interval
(positive: the run's steps lower the bound more than uniform's).

The samplers' distributions at the checkpoint: stateless samplers (uniform, speed, lognormal, ...) as configured;
the learned sampler (adaptive) with the policy (and the rest of its sampler state) of the checkpoint at the same step
in --policy_workdir, a learned-sampler run of the same config and seed (its own diffusion model is not used);
samplers whose state is a loss history (loss_second_moment, adaptive_noise, infonoise) primed at the checkpoint with
--prime_per_t losses of every timestep (training images, fresh noise, the checkpoint's raw parameters, train mode),
the state they hold once warm.

The bound: --mode=eval's full bound over --images test images (-1: all) when --bound_timesteps=0, else its unbiased
stratified estimate from that many timesteps per image (the periodic evaluation's estimator), with the same key for
every evaluation. Written to --out (default: the --workdir's bound_reduction/): bound_reduction.md and .json.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.samplers import as_given, literal, load_config, measured_here, parse_runs  # noqa: E402
from core.fingerprint import without_paths  # noqa: E402

EVAL_KEY = 0xB0D  # every bound of the benchmark is computed with this key: the same timesteps and noise
REPLICATE_SEED = 1000  # replicate r draws its batches with data seed 1000 + r and its step keys from PRNGKey(1000 + r)


def run_config(base, sampler: str, weighting: str, settings):
    c = base.copy_and_resolve_references()
    c.sampler.name, c.weighting.name = sampler, weighting
    for s in settings:
        k, _, v = s.partition("=")
        c.sampler[sampler][k] = literal(v)
    return c


def restore_at(setup, workdir: str, step: int):
    """The train state of `workdir`'s checkpoint at `step` (read only: the manager never deletes, nothing is
    written)."""
    from training import checkpoint as ckpt

    c = setup.config.copy_and_resolve_references()
    c.train.keep_checkpoints = 10**9  # a manager with fewer to keep could remove old ones on a later save
    mngr = ckpt.make_manager(c, os.path.abspath(workdir))
    try:
        if step not in mngr.all_steps():
            sys.exit(f"error: --steps: {workdir} has no checkpoint at step {step} (it has {sorted(mngr.all_steps())})")
        abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
        return ckpt.restore(mngr, step, abstract, workdir)
    finally:
        mngr.close()


def primed(setup, state, train, key, per_t: int):
    """A history sampler's state after one update that records per_t losses of every timestep, computed with the
    state's raw parameters on training images (train mode)."""
    import jax
    import jax.numpy as jnp

    from samplers.base import StepContext
    from training.step import make_apply, make_objective, to_float

    T = setup.process.num_timesteps
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    n = T * per_t
    x0 = to_float(jnp.asarray(train.get(rng.integers(0, len(train), n))))
    t = jnp.tile(jnp.arange(T, dtype=jnp.int32), per_t)
    k_noise, k_drop = jax.random.split(key)
    noise = jax.random.normal(k_noise, x0.shape, jnp.float32)
    objective = make_objective(make_apply(setup.model), setup.process, setup.weighting)

    @jax.jit
    def terms(params):
        return *objective(params, x0, t, noise, k_drop), setup.weighting(t)

    losses, mse, loss_weight = terms(state.params)
    s0 = setup.sampler.init(key, x0[: setup.config.train.batch_size])
    ctx = StepContext(
        step=state.step,
        key=key,
        x0=x0,
        t=t,
        aux={},
        losses=losses,
        params_before=None,
        params_after=None,
        rows_fn=None,
        mse=mse,
        loss_weight=loss_weight,
    )
    return setup.sampler.update(s0, ctx)[0]


def interval(x):
    """(mean, half-width of the 95% t interval) of x [n]."""
    from scipy import stats

    x = np.asarray(x, np.float64)
    if len(x) < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def fmt(mh, scale=1e3):
    m, h = mh
    return f"{m * scale:+.2f} ± {h * scale:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True, help="a uniform-sampler run whose checkpoints are the starting points")
    ap.add_argument("--policy_workdir", default="", help="a learned-sampler run of the same config (for adaptive)")
    ap.add_argument("--config", default="configs/default.py", help="the runs' config file (FILE[:ARG])")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="config override (repeatable)")
    ap.add_argument("--runs", default="uniform,adaptive,speed,lognormal,loss_second_moment,adaptive_noise,infonoise")
    ap.add_argument("--steps", required=True, help="checkpoint steps, e.g. early, middle, late: 1000,5000,10000")
    ap.add_argument("--k", type=int, default=20, help="train steps from each checkpoint")
    ap.add_argument("--replicates", type=int, default=16)
    ap.add_argument("--bound_timesteps", type=int, default=100, help="0: the full bound over all T timesteps")
    ap.add_argument("--images", type=int, default=-1, help="test images (-1: all)")
    ap.add_argument("--prime_per_t", type=int, default=10, help="losses per timestep that prime history samplers")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    runs = parse_runs(args.runs)
    steps = [int(s) for s in args.steps.split(",")]
    if args.k < 1 or args.replicates < 2:
        sys.exit(f"error: --k={args.k} must be >= 1 and --replicates={args.replicates} >= 2 (for an interval)")
    if any(s == "adaptive" for _, s, _ in runs) and not args.policy_workdir:
        sys.exit("error: --runs has adaptive: give --policy_workdir, a learned-sampler run with checkpoints at --steps")
    base = load_config(args.config, args.set)
    from training.platform import prepare_host

    prepare_host(base)
    import jax

    from data import load_split
    from data.pipeline import BatchIterator
    from evaluation.bound import bound_bpd, test_data
    from training.setup import build

    setups = {name: build(run_config(base, s, w, settings)) for name, s, (w, settings) in runs}
    ref = setups["uniform"]
    c = ref.config
    images, labels = test_data(ref, args.images)
    train = load_split(c.data, "train")
    eval_key = jax.random.PRNGKey(EVAL_KEY)
    steps_fn = {name: jax.jit(st.make_step(False)) for name, st in setups.items()}  # no periodic update, no donation

    def bound(params):
        return bound_bpd(ref, params, images, eval_key, num_t=args.bound_timesteps, labels=labels)[0]

    t0 = time.perf_counter()
    results = {}
    for step in steps:
        start = restore_at(ref, args.workdir, step)
        before = bound(start.params)
        sampler_states = {}
        for name, s, _ in runs:
            if s == "adaptive":
                sampler_states[name] = restore_at(setups[name], args.policy_workdir, step).sampler_state
            elif s in ("loss_second_moment", "adaptive_noise", "infonoise"):
                sampler_states[name] = primed(setups[name], start, train, jax.random.PRNGKey(step), args.prime_per_t)
            else:
                x = jax.numpy.zeros(setups[name].batch_shape(c.train.batch_size), jax.numpy.float32)
                sampler_states[name] = jax.jit(setups[name].sampler.init)(jax.random.PRNGKey(0), x)
        red = {name: [] for name, _, _ in runs}
        mean_t = {name: [] for name, _, _ in runs}
        for r in range(args.replicates):
            it = BatchIterator(
                train,
                REPLICATE_SEED + r,
                c.train.batch_size,
                ref.batch_sharding,
                start_step=step,
                random_flip=c.data.get("random_flip", False),
                labels=ref.conditional,
            )
            batches = [next(it)[1] for _ in range(args.k)]
            it.close()
            rng = jax.device_put(jax.random.PRNGKey(REPLICATE_SEED + r), start.rng.sharding)
            for name, _, _ in runs:
                state = start.replace(sampler_state=sampler_states[name], rng=rng)
                hist = 0
                for b in batches:
                    state, metrics = steps_fn[name](state, b)
                    hist = hist + metrics["t_hist"]  # on the device: no transfer per step
                hist = np.asarray(hist, np.float64)
                red[name].append(before - bound(state.params))
                mean_t[name].append(float((hist * (np.arange(len(hist)) + 0.5)).sum() / hist.sum() / len(hist)))
            print(
                f"step {step} replicate {r}: "
                + ", ".join(f"{n} {red[n][-1] * 1e3:+.2f}" for n, _, _ in runs)
                + f" (x1e-3 bits/dim; {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
        results[step] = dict(before=before, reduction=red, mean_t=mean_t)

    seconds = time.perf_counter() - t0
    out = args.out or os.path.join(args.workdir, "bound_reduction")
    os.makedirs(out, exist_ok=True)
    md = table(results, runs, args, c, seconds)
    with open(os.path.join(out, "bound_reduction.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out, "bound_reduction.json"), "w") as f:
        record = dict(args=as_given(args), fingerprints=measured_here(c), seconds=seconds)
        json.dump(dict(record, results={str(k): v for k, v in results.items()}), f, indent=1)
    print(md)
    print(f"\nWritten: {out}/bound_reduction.md, {out}/bound_reduction.json ({seconds:.0f} s)")


def table(results, runs, args, c, seconds):
    what = (
        "full bound"
        if args.bound_timesteps == 0
        else f"stratified estimate of the full bound, {args.bound_timesteps} t"
    )
    lines = [
        "`python benchmarks/bound_reduction.py " + without_paths(" ".join(sys.argv[1:])) + "`",
        "",
        f"Reduction of the test bound ({what} per image, {args.images if args.images > 0 else 'all'} test images, "
        f"the same noise for every evaluation) after K = {args.k} train steps from each checkpoint of the uniform run "
        f"(raw parameters), in 1e-3 bits/dim: mean ± 95% half-width over {args.replicates} paired replicates (same "
        f"batches and step keys for every run). Δ vs uniform: paired difference (positive: lowers the bound more "
        f"than uniform). Mean t/T: the average drawn timestep over the K steps, as a fraction of T = "
        f"{c.diffusion.get('num_timesteps', '-')}. Wall-clock {seconds / 60:.1f} min.",
        "",
        "| checkpoint step | bound there | run | reduction | Δ vs uniform | mean t/T |",
        "|---|---|---|---|---|---|",
    ]
    for step, res in results.items():
        red, u = res["reduction"], np.asarray(res["reduction"]["uniform"])
        for name, _, _ in runs:
            x = np.asarray(red[name])
            d = "-" if name == "uniform" else fmt(interval(x - u))
            lines.append(
                f"| {step} | {res['before']:.4f} | {name} | {fmt(interval(x))} | {d} | "
                f"{np.mean(res['mean_t'][name]):.3f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
