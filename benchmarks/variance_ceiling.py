"""The variance ceiling of unbiased timestep sampling: at checkpoints of a run, how large the second moment of the
importance-weighted gradient is under uniform t, the adaptive noise schedule's p, three loss-based proxies and the
two variance-optimal proposals (docs/benchmarks/ceilings.md#the-variance-ceiling-2026-12-07).

    python benchmarks/variance_ceiling.py --config=configs/default.py --out=workdirs/vc_ddpm --steps=250,1000,2000
    python benchmarks/variance_ceiling.py --config=configs/flow.py --out=workdirs/vc_flow --steps=250,1000,2000
    python benchmarks/variance_ceiling.py --config=configs/mnist_latent.py:dit --out=workdirs/vc_latent \\
        --steps=250,1000,2000

The run. The config trained with the adaptive noise schedule (sampler.name=adaptive_noise), checkpoints every
--ckpt_every steps kept, periodic evaluation off, in OUT/run (skipped when its checkpoints exist; --workdir takes an
existing run of that sampler instead). At each checkpoint every proposal is evaluated on the same model: the run's
raw parameters (what its train step differentiates, not the EMA), with the schedule's density from the same
checkpoint's sampler state.

The grid. N test images (--images), R independent draws (--draws) of K strata (--strata) per image: in draw r
image n gets one t uniformly in each stratum k and its own Gaussian noise and dropout masks (the network runs in
train mode, as in the step; a class-conditional model sees each image's true label, without label dropout). Strata:
on a chain "geometric" (t = 0 alone, then diffusion.gaussian.stratum_edges, fine where log SNR moves fast) or
"even"; in continuous time equal intervals. a_k = stratum k's measure under uniform t (cells / T; sum_k a_k = 1).
Per row: the training objective L (training/step.py make_objective, before any importance weight) and G = |g|^2, g
its gradient w.r.t. the diffusion model's parameters (jax.vmap of jax.grad, in chunks of whole images).

The estimator. With u the uniform density and rho(t|x) = p(t|x) / u(t) (T p(t) on a chain, p(t) in continuous time),

    M(p) = E_x E_{t~p}[|g(x,t) u(t) / p(t|x)|^2] = E_x E_{t~u}[|g(x,t)|^2 / rho(t|x)]
    M_hat(p) = 1/(R N) sum_{r,n} sum_k a_k G[r,n,k] / rho(t_rnk | x_n)

is unbiased (stratified: one uniform t per stratum, weighted by its measure). A proposal constant within each stratum,
with stratum masses pi_k (per image: pi_nk), has rho = pi_k / a_k, so M_hat = mean_{r,n} sum_k a_k^2 G[r,n,k] / pi_k.
Minimised over pi with Gbar_k = mean_{r,n} G[r,n,k]:

    best marginal   pi_k proportional to a_k sqrt(Gbar_k)        (p*(t) proportional to sqrt(E_x |g(x,t)|^2))
                    M = (sum_k a_k sqrt(Gbar_k))^2
    best per image  pi_nk proportional to a_k sqrt(mean_r G[r,n,k]) (p*(t|x) proportional to |g(x,t)|)
                    M = mean_n (sum_k a_k sqrt(mean_r G[r,n,k]))^2

and for any G: M(best per image) <= M(best marginal) <= M(uniform) = mean sum_k a_k G (Cauchy-Schwarz). The proxies,
from the same rows' losses: "loss mean" (the schedule's rule: pi_k proportional to a_k mean L) and "loss second
moment" (pi_k proportional to a_k sqrt(mean L^2), improved-diffusion's LossSecondMomentResampler), and "loss per
image" (pi_nk proportional to a_k sqrt(mean_r L[r,n,k]^2)). Fitted proposals are mixed with uniform, (1 - floor) pi +
floor a (--floor, 0.001 as the samplers' uniform_prob), and are not constant below the strata's resolution: finer
proposals can only do better, so the ceilings are lower bounds of what a proposal can gain.

In-sample and cross-fitted. A proposal fitted on the rows it is scored on is optimistic: sqrt is concave, so a per-image
fit to one noise draw conditions on the noise, which no sampler can. Each fitted proposal is therefore scored twice:
"plug-in" (fitted and scored on all draws: the closed forms above) and "cross-fitted" (scored on draw r, fitted on the
other R - 1 draws; R >= 2): any fixed proposal scored on fresh rows is unbiased for its M, which is at least the
optimum, so a cross-fitted M errs high by its fitting noise and the plug-in M low; the truth is between them. The
tables use the cross-fitted values; the plug-in ratio of marginal to per-image is reported beside it.

The mean gradient. h_n = mean_r sum_k a_k g(x_n, t_rnk) is unbiased for image n's gradient of the uniform objective;
|E g|^2 is estimated without bias by the U-statistic (|sum_n h_n|^2 - sum_n |h_n|^2) / (N (N - 1)) (from the Gram
matrix h h^T), and the variance part of each proposal is V(p) = M(p) - |E g|^2 (the same |E g|^2 for every unbiased
p). Errors: a bootstrap over images (--bootstrap resamples; all fits redone), 95% percentile intervals of the ratios.

What a ratio is worth in steps: a model, not a measurement
(docs/benchmarks/ceilings.md#the-variance-ceiling-2026-12-07).
With the noise scale B_noise(p) = V(p) / |E g|^2 (McCandlish et al. 2018's simple noise scale of the per-example
gradient), steps to a target scale as S(p) = S_min (1 + B_noise(p) / B) at batch B; a variance ratio r is a batch r
times larger.

Written to OUT: variance_ceiling.md (tables), variance_ceiling.json (every number), variance_ceiling.png (the
proposals' densities relative to uniform over t at each checkpoint) and tables_STEP.npz (G, L, rho, the Gram
matrix, t and a of each checkpoint: every figure above is a function of them).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bound_reduction import restore_at  # noqa: E402
from benchmarks.samplers import as_given, load_config, measured_here, timed  # noqa: E402
from core.fingerprint import without_paths  # noqa: E402

SCHEDULE = "adaptive_noise"
KEY = 0x5EC0  # the grid's timesteps, noise and dropout masks: the same at every checkpoint
FIXED = ("uniform", "schedule")  # proposals given, not fitted from the grid
FITTED = ("loss mean", "loss second moment", "best marginal", "loss per image", "best per image")
PROPOSALS = FIXED + FITTED
PER_IMAGE = ("loss per image", "best per image")


def in_repo(path: str) -> str:
    """A path as a record names it: relative to the repository when inside it, else <path> (no machine's path)."""
    rel = os.path.relpath(path, ROOT)
    return "<path>" if rel == ".." or rel.startswith(".." + os.sep) else rel


# -- the estimator (pure NumPy; every function of the G and L tables) --------------------------------------------


def mix(pi, a, floor):
    """(1 - floor) pi + floor a: stratum masses [..., K] mixed with uniform's."""
    return (1.0 - floor) * pi + floor * a


def normalise(w):
    """w [..., K] >= 0 -> masses summing to 1 over the last axis (uniform where w sums to 0)."""
    s = w.sum(-1, keepdims=True)
    return np.where(s > 0, w / np.where(s > 0, s, 1.0), 1.0 / w.shape[-1])


def fit(name, G, L, a, floor):
    """Stratum masses of a fitted proposal from G, L [R, N, K] (rows of the draws it is fitted on) and a [K]: [K]
    for a marginal proposal, [N, K] for a per-image one, mixed with uniform (`floor`)."""
    if name == "loss mean":
        w = a * L.mean((0, 1))
    elif name == "loss second moment":
        w = a * np.sqrt((L**2).mean((0, 1)))
    elif name == "best marginal":
        w = a * np.sqrt(G.mean((0, 1)))
    elif name == "loss per image":
        w = a * np.sqrt((L**2).mean(0))
    elif name == "best per image":
        w = a * np.sqrt(G.mean(0))
    else:
        raise ValueError(f"not a fitted proposal: {name!r}")
    return mix(normalise(np.maximum(w, 0.0)), a, floor)


def second_moment(G, a, rho):
    """M_hat = mean_{r,n} sum_k a_k G[r,n,k] / rho[r,n,k] (module docstring): G [R, N, K], a [K], rho broadcastable
    to G (the proposal's density relative to uniform at each row's t). A row with G = 0 adds 0 whatever rho (the
    limit where a proposal gives no mass to a zero gradient)."""
    rho = np.broadcast_to(rho, G.shape)
    terms = np.where(G > 0, a * G / np.where(G > 0, rho, 1.0), 0.0)
    return float(np.mean(np.sum(terms, axis=-1)))


def stratum_rho(pi, a):
    """A stratum-constant proposal's rho = pi_k / a_k; pi [K] or [N, K]."""
    return pi / a


def moments(G, L, a, rho_schedule, floor=0.001, cross=True):
    """{proposal: M_hat} of every proposal (PROPOSALS) on the tables G, L [R, N, K] (a [K]; rho_schedule [R, N, K]:
    the schedule's density relative to uniform at each row's t, or None to leave it out). Fitted proposals are
    cross-fitted (scored on draw r, fitted on the others) when `cross` and R >= 2, else plug-in."""
    R = G.shape[0]
    out = {"uniform": second_moment(G, a, 1.0)}
    if rho_schedule is not None:
        out["schedule"] = second_moment(G, a, rho_schedule)
    for name in FITTED:
        if cross and R >= 2:
            parts = []
            for r in range(R):
                rest = np.arange(R) != r
                pi = fit(name, G[rest], L[rest], a, floor)
                parts.append(second_moment(G[r : r + 1], a, stratum_rho(pi, a)))
            out[name] = float(np.mean(parts))
        else:
            out[name] = second_moment(G, a, stratum_rho(fit(name, G, L, a, floor), a))
    return out


def mean_gradient_sq(gram, ids=None):
    """|E g|^2 estimated without bias from the Gram matrix gram [N, N] = h h^T of per-image mean gradients: the mean
    of gram over pairs of different images, (sum_ij gram - trace) / (N (N - 1)). ids [N]: each row's image (a
    bootstrap resample repeats images; a pair of copies of one image is left out like the diagonal)."""
    N = gram.shape[0]
    if ids is None:
        return float((gram.sum() - np.trace(gram)) / (N * (N - 1)))
    other = ids[:, None] != ids[None, :]
    return float(gram[other].sum() / max(other.sum(), 1))


def tv(p, q):
    """Total variation between stratum masses p and q ([K], or [N, K]: the mean over images)."""
    return float(np.mean(0.5 * np.abs(p - q).sum(-1)))


def summary(G, L, a, rho_schedule, gram, floor=0.001, cross=True, ids=None):
    """Every figure of one checkpoint: M and V of each proposal, the ratios, the proxies' TV from the best
    proposals (ids: the images of a bootstrap resample, for mean_gradient_sq)."""
    M = moments(G, L, a, rho_schedule, floor, cross)
    plug = moments(G, L, a, None, floor, cross=False)
    eg2 = mean_gradient_sq(gram, ids) if gram is not None else float("nan")
    V = {k: m - eg2 for k, m in M.items()}
    ratios = dict(
        uniform_over_best_marginal=M["uniform"] / M["best marginal"],
        best_marginal_over_best_per_image=M["best marginal"] / M["best per image"],
        best_marginal_over_best_per_image_plugin=plug["best marginal"] / plug["best per image"],
        loss_second_moment_over_best_marginal=M["loss second moment"] / M["best marginal"],
        loss_mean_over_best_marginal=M["loss mean"] / M["best marginal"],
        uniform_over_best_per_image=M["uniform"] / M["best per image"],
    )
    if "schedule" in M:
        ratios["schedule_over_best_marginal"] = M["schedule"] / M["best marginal"]
        ratios["uniform_over_schedule"] = M["uniform"] / M["schedule"]
    vratios = {}
    if np.isfinite(eg2):
        for k, (num, den) in dict(
            uniform_over_best_marginal=("uniform", "best marginal"),
            schedule_over_best_marginal=("schedule", "best marginal"),
            uniform_over_schedule=("uniform", "schedule"),
            best_marginal_over_best_per_image=("best marginal", "best per image"),
        ).items():
            if num in V and den in V:
                vratios[k] = V[num] / V[den]
    fits = {name: fit(name, G, L, a, floor) for name in FITTED}
    agreement = dict(
        loss_mean_vs_best_marginal=tv(fits["loss mean"], fits["best marginal"]),
        loss_second_moment_vs_best_marginal=tv(fits["loss second moment"], fits["best marginal"]),
        loss_per_image_vs_best_per_image=tv(fits["loss per image"], fits["best per image"]),
        best_marginal_vs_best_per_image=tv(fits["best marginal"][None], fits["best per image"]),
        uniform_vs_best_marginal=tv(a, fits["best marginal"]),
    )
    return dict(M=M, M_plugin=plug, mean_grad_sq=eg2, V=V, ratios=ratios, variance_ratios=vratios, tv=agreement)


def bootstrap(G, L, a, rho_schedule, gram, floor, cross, n, seed=0):
    """{ratio: (lo, hi)} 95% percentile intervals of summary's ratios and variance ratios over n resamples of
    the images (every fit redone), and {ratio: sd}."""
    rng = np.random.default_rng(seed)
    N = G.shape[1]
    draws = {}
    for _ in range(n):
        i = rng.integers(0, N, N)
        s = summary(
            G[:, i],
            L[:, i],
            a,
            None if rho_schedule is None else rho_schedule[:, i],
            None if gram is None else gram[np.ix_(i, i)],
            floor,
            cross,
            ids=i,
        )
        extra = dict(mean_grad_share=s["mean_grad_sq"] / s["M"]["uniform"])
        for k, v in {**s["ratios"], **{"V:" + k: v for k, v in s["variance_ratios"].items()}, **extra}.items():
            draws.setdefault(k, []).append(v)
    ci = {k: tuple(float(x) for x in np.percentile(v, [2.5, 97.5])) for k, v in draws.items()}
    sd = {k: float(np.std(v, ddof=1)) for k, v in draws.items()}
    return ci, sd


def steps_model(v_ratio_of_p, b_noise_uniform, batch):
    """The noise-scale model's steps of proposal p relative to uniform's, S(p) / S(uniform) =
    (1 + B_noise(u) / (r B)) / (1 + B_noise(u) / B), r = V(uniform) / V(p) (module docstring)."""
    x = b_noise_uniform / batch
    return (1.0 + x / v_ratio_of_p) / (1.0 + x)


# -- the grid on the model ---------------------------------------------------------------------------------------


def on_chain(process) -> bool:
    """Whether the process's time is the DDPM chain's steps (the one place this benchmark tells the domains apart)."""
    from diffusion.time import DiscreteTime

    return isinstance(process.time, DiscreteTime)


def strata(process, K: int, kind: str):
    """(lo [K], size [K], a [K]): the strata of the time domain (module docstring); on a chain in steps, in
    continuous time in units of t."""
    from diffusion.gaussian import stratum_edges

    if on_chain(process):
        T = process.time.size
        if kind == "geometric":
            edges = np.concatenate([[0], stratum_edges(T, K - 1)])
        else:
            edges = (np.arange(K + 1) * T) // K
        return edges[:-1], np.diff(edges), np.diff(edges) / T
    edges = np.linspace(0.0, 1.0, K + 1)
    return edges[:-1], np.diff(edges), np.diff(edges)


def draw_times(process, key, lo, size, shape):
    """One uniform time in each stratum for every leading index: [*shape, K]."""
    import jax
    import jax.numpy as jnp

    from diffusion.time import STRATA_EPS

    u = jax.random.uniform(key, (*shape, len(lo)))
    if on_chain(process):
        t = jnp.asarray(lo) + jnp.floor(u * jnp.asarray(size)).astype(jnp.int32)
        return jnp.minimum(t, jnp.asarray(lo + size - 1)).astype(jnp.int32)
    t = jnp.asarray(lo, jnp.float32) + u * jnp.asarray(size, jnp.float32)
    return jnp.clip(t, STRATA_EPS, 1.0 - STRATA_EPS).astype(jnp.float32)


def make_chunk_fn(setup, rows_per_image: int):
    """fn(params, x [c, ...], t [c, Q], noise [c, Q, ...], keys [c, Q], y [c] or None, w [Q]) -> (L [c, Q],
    G [c, Q], h [c, P]): per row the training objective and its gradient's squared norm, per image the w-weighted
    sum of its rows' gradients (flattened), for c images of Q = rows_per_image rows each."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from training.step import make_apply, make_objective

    objective = make_objective(make_apply(setup.model), setup.process, setup.weighting)

    def row_loss(params, x, t, n, key, y):
        return objective(params, x[None], t[None], n[None], key, None if y is None else y[None])[0][0]

    def image_rows(params, x, t, noise, keys, y, w):
        xs = jnp.broadcast_to(x, (rows_per_image, *x.shape))
        ys = None if y is None else jnp.broadcast_to(y, (rows_per_image,))
        axes = (None, 0, 0, 0, 0, None if y is None else 0)
        loss, g = jax.vmap(jax.value_and_grad(row_loss), in_axes=axes)(params, xs, t, noise, keys, ys)
        flat = jax.vmap(lambda gi: ravel_pytree(gi)[0])(g)
        return loss, jnp.sum(flat**2, axis=1), w @ flat

    @jax.jit
    def chunk(params, x, t, noise, keys, y, w):
        in_axes = (None, 0, 0, 0, 0, None if y is None else 0, None)
        return jax.vmap(image_rows, in_axes=in_axes)(params, x, t, noise, keys, y, w)

    return chunk


def grid_tables(setup, params, sampler_state, images, labels, args, lo, size, a):
    """(G, L, rho_schedule [R, N, K], gram [N, N], t [R, N, K]) of one checkpoint (module docstring)."""
    import jax
    import jax.numpy as jnp

    from training.step import to_float

    R, K = args.draws, len(lo)
    N = len(images)
    Q = R * K
    key = jax.random.PRNGKey(KEY)
    k_t, k_noise, k_drop = jax.random.split(key, 3)
    t = draw_times(setup.process, k_t, lo, size, (N, R))  # [N, R, K]
    x = to_float(jnp.asarray(images))
    w = jnp.asarray(np.tile(a / R, R), jnp.float32)  # row (r, k) of an image: a_k / R
    chunk = setup.cached(("variance_ceiling", Q), lambda: make_chunk_fn(setup, Q))
    L, G, H = [], [], []
    c = args.images_per_chunk
    for i in range(0, N, c):
        j = min(N, i + c)
        tt = t[i:j].reshape(j - i, Q)
        noise = jax.random.normal(jax.random.fold_in(k_noise, i), (j - i, Q, *x.shape[1:]), jnp.float32)
        keys = jax.random.split(jax.random.fold_in(k_drop, i), (j - i) * Q).reshape(j - i, Q, -1)
        y = None if labels is None else jnp.asarray(labels[i:j], jnp.int32)
        loss, g2, h = chunk(params, x[i:j], tt, noise, keys, y, w)
        L.append(np.asarray(loss, np.float64))
        G.append(np.asarray(g2, np.float64))
        H.append(np.asarray(h, np.float64))
    to_rnk = lambda z: np.concatenate(z).reshape(N, R, K).transpose(1, 0, 2)
    h = np.concatenate(H)
    t_rnk = np.asarray(t).transpose(1, 0, 2)
    rho = np.asarray(jax.jit(setup.sampler.density)(sampler_state, jnp.asarray(t_rnk.reshape(-1))), np.float64)
    return to_rnk(G), to_rnk(L), rho.reshape(R, N, K), h @ h.T, t_rnk


def schedule_curve(setup, sampler_state, points: int = 1000):
    """(t/T or t [points], the schedule's density relative to uniform there) for the figure."""
    import jax
    import jax.numpy as jnp

    time_ = setup.process.time
    if on_chain(setup.process):
        t = np.arange(time_.size)
        x = (t + 0.5) / time_.size
    else:
        x = (np.arange(points) + 0.5) / points
        t = x
    rho = jax.jit(setup.sampler.density)(sampler_state, jnp.asarray(t, time_.dtype))
    return x, np.asarray(rho, np.float64)


# -- the run, the tables, the figure -----------------------------------------------------------------------------


def run_flags(args, steps):
    return [
        f"--config.sampler.name={SCHEDULE}",
        f"--config.train.num_steps={max(steps)}",
        f"--config.train.ckpt_every={args.ckpt_every}",
        "--config.train.keep_checkpoints=100",
        "--config.eval.periodic.every=0",
        *[f"--config.{s}" for s in args.set],
    ]


def train(args, steps):
    """The adaptive noise schedule's run in OUT/run (module docstring), unless its checkpoints exist: its workdir."""
    wd = os.path.abspath(os.path.join(args.out, "run"))  # main.py runs in ROOT
    ckpts = os.path.join(wd, "checkpoints")
    if os.path.isdir(ckpts) and all(str(s) in os.listdir(ckpts) for s in steps):
        return wd
    if any(s % args.ckpt_every for s in steps):
        sys.exit(f"error: --steps={args.steps}: every step must be a multiple of --ckpt_every={args.ckpt_every}")
    os.makedirs(wd, exist_ok=True)
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--config={args.config}", f"--workdir={wd}"]
    rc, seconds = timed(
        cmd + run_flags(args, steps), os.path.join(wd, "train.log"), os.path.join(wd, "bench_seconds.json"), "train"
    )
    if rc:
        sys.exit(f"error: training failed (exit {rc}); log: {wd}/train.log")
    print(f"trained in {seconds:.0f} s", flush=True)
    return wd


def fmt_ci(v, ci):
    return f"{v:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def tables(results, args, seconds):
    lines = [
        "`python benchmarks/variance_ceiling.py " + without_paths(" ".join(sys.argv[1:])) + "`",
        "",
        f"{args.config}, the adaptive noise schedule's run ({results['workdir']}), raw parameters at each "
        f"checkpoint; {args.images} test images x {args.draws} draws x {args.strata} {results['strata_kind']} strata "
        f"(rows: {args.images * args.draws * args.strata} per checkpoint); fitted proposals cross-fitted across "
        f"draws, uniform floor {args.floor}; 95% bootstrap intervals over images ({args.bootstrap} resamples). "
        f"Wall-clock {seconds / 60:.1f} min.",
        "",
        "Second moments M(p) (ratios; >= 1 means the second is better):",
        "",
        "| step | M(uniform) | M(sched)/M(best marg) | M(unif)/M(best marg) | M(unif)/M(sched) | M(best marg)/M(best "
        "per-image) | same, plug-in | M(LSM)/M(best marg) | M(loss mean)/M(best marg) | s / step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step, r in results["checkpoints"].items():
        q, ci = r["ratios"], r["ci"]
        cell = lambda k: fmt_ci(q[k], ci[k]) if k in q else "-"
        lines.append(
            f"| {step} | {r['M']['uniform']:.4g} | {cell('schedule_over_best_marginal')} | "
            f"{cell('uniform_over_best_marginal')} | {cell('uniform_over_schedule')} | "
            f"{cell('best_marginal_over_best_per_image')} | {cell('best_marginal_over_best_per_image_plugin')} | "
            f"{cell('loss_second_moment_over_best_marginal')} | {cell('loss_mean_over_best_marginal')} | "
            f"{r['seconds']:.0f} |"
        )
    lines += [
        "",
        "Variance parts V(p) = M(p) - |E g|^2, the noise scale and the proxies' agreement (TV between stratum masses; "
        "per-image: the mean over images):",
        "",
        "| step | \\|E g\\|^2 / M(uniform) | B_noise(uniform) | V(sched)/V(best marg) | V(unif)/V(best marg) | "
        "V(unif)/V(sched) | TV(LSM, best marg) | TV(loss mean, best marg) | TV(loss per image, best per image) | "
        "TV(best marg, best per image) | TV(uniform, best marg) | TV(sched, best marg) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step, r in results["checkpoints"].items():
        v, ci = r["variance_ratios"], r["ci"]
        cell = lambda k: fmt_ci(v[k], ci["V:" + k]) if k in v else "-"
        a = r["tv"]
        share = f"{r['mean_grad_sq'] / r['M']['uniform']:.3g}"
        if "mean_grad_share" in ci:
            share += f" [{ci['mean_grad_share'][0]:.3g}, {ci['mean_grad_share'][1]:.3g}]"
        lines.append(
            f"| {step} | {share} | {r['b_noise_uniform']:.3g} | "
            f"{cell('schedule_over_best_marginal')} | {cell('uniform_over_best_marginal')} | "
            f"{cell('uniform_over_schedule')} | {a['loss_second_moment_vs_best_marginal']:.3f} | "
            f"{a['loss_mean_vs_best_marginal']:.3f} | {a['loss_per_image_vs_best_per_image']:.3f} | "
            f"{a['best_marginal_vs_best_per_image']:.3f} | {a['uniform_vs_best_marginal']:.3f} | "
            f"{a.get('schedule_vs_best_marginal', float('nan')):.3f} |"
        )
    lines += [
        "",
        f"Steps relative to uniform's by the noise-scale model (S = S_min (1 + B_noise / B), B = {results['batch']}; "
        "a model, not a measurement):",
        "",
        "| step | schedule | best marginal | best per image |",
        "|---|---|---|---|",
    ]
    for step, r in results["checkpoints"].items():
        s = r["steps_model"]
        lines.append(
            f"| {step} | {s.get('schedule', float('nan')):.3f} | {s['best marginal']:.3f} | {s['best per image']:.3f} |"
        )
    return "\n".join(lines)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cps = results["checkpoints"]
    fig, axes = plt.subplots(1, len(cps), figsize=(5 * len(cps), 4), squeeze=False)
    for ax, (step, r) in zip(axes[0], cps.items()):
        d = r["densities"]
        lo, hi = np.asarray(d["edges"][:-1]), np.asarray(d["edges"][1:])
        ax.plot(d["schedule_x"], d["schedule_rho"], label="schedule (its state)", lw=1.5, color="k")
        for name, style in (
            ("loss mean", ":"),
            ("loss second moment", "--"),
            ("best marginal", "-"),
        ):
            rho = np.asarray(d[name])
            ax.hlines(rho, lo, hi, label=name, linestyles=style, lw=1.5, color=f"C{FITTED.index(name)}")
        pi = np.asarray(d["best per image"])  # [N, K] relative to uniform
        ax.fill_between(
            np.column_stack([lo, hi]).ravel(),
            np.repeat(np.percentile(pi, 10, 0), 2),
            np.repeat(np.percentile(pi, 90, 0), 2),
            alpha=0.25,
            color="C4",
            label="best per image (10-90% over images)",
        )
        ax.axhline(1.0, color="grey", lw=1, label="uniform")
        ax.set(title=f"step {step}", xlabel="t / T", ylabel="p(t) / u(t)", yscale="log")
        if results["strata_kind"] == "geometric":  # strata even in log t: so is the axis
            ax.set_xscale("log")
            ax.set_xlim(0.5 * hi[0], 1.0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/default.py", help="FILE[:ARG], as main.py's --config")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="", help=f"an existing {SCHEDULE} run (default: train one in OUT/run)")
    ap.add_argument("--steps", default="250,1000,2000", help="checkpoints")
    ap.add_argument("--ckpt_every", type=int, default=250)
    ap.add_argument("--images", type=int, default=64, help="test images N")
    ap.add_argument("--draws", type=int, default=2, help="independent draws R of the strata per image")
    ap.add_argument("--strata", type=int, default=32, help="strata K")
    ap.add_argument("--strata_kind", default="geometric", choices=("geometric", "even"), help="on a chain")
    ap.add_argument("--images_per_chunk", type=int, default=2, help="images per jitted chunk (memory)")
    ap.add_argument("--floor", type=float, default=0.001, help="uniform mixture of the fitted proposals")
    ap.add_argument("--bootstrap", type=int, default=500)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="config override (repeatable)")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    if args.images < 2 or args.draws < 1 or args.strata < 2:
        sys.exit("error: --images must be >= 2 (the mean gradient's U-statistic), --draws >= 1, --strata >= 2")
    os.makedirs(args.out, exist_ok=True)
    wd = args.workdir or train(args, steps)

    base = load_config(args.config, [f"sampler.name={SCHEDULE}", *args.set])
    from training.platform import prepare_host

    prepare_host(base)
    from evaluation.bound import test_data
    from training.setup import build

    setup = build(base)
    images, labels = test_data(setup, args.images)
    kind = args.strata_kind if on_chain(setup.process) else "even"
    lo, size, a = strata(setup.process, args.strata, kind)
    edges = np.cumsum(np.concatenate([[0.0], a]))  # the strata's edges in t / T (or t)
    B = int(base.train.batch_size)
    results = dict(
        config=args.config,
        workdir=in_repo(wd),
        strata_kind=kind,
        a=a.tolist(),
        batch=B,
        args=as_given(args),
        fingerprints=measured_here(base),
        checkpoints={},
    )
    t0 = time.perf_counter()
    for step in steps:
        t1 = time.perf_counter()
        state = restore_at(setup, wd, step)
        G, L, rho, gram, t = grid_tables(setup, state.params, state.sampler_state, images, labels, args, lo, size, a)
        s = summary(G, L, a, rho, gram, args.floor)
        np.savez_compressed(os.path.join(args.out, f"tables_{step}.npz"), G=G, L=L, rho=rho, gram=gram, t=t, a=a)
        ci, sd = bootstrap(G, L, a, rho, gram, args.floor, True, args.bootstrap)
        b_noise = s["V"]["uniform"] / s["mean_grad_sq"] if s["mean_grad_sq"] > 0 else float("inf")
        model = {}
        for name in ("schedule", "best marginal", "best per image"):
            if name in s["V"] and s["V"][name] > 0 and np.isfinite(b_noise):
                model[name] = steps_model(s["V"]["uniform"] / s["V"][name], b_noise, B)
        fits = {name: fit(name, G, L, a, args.floor) for name in FITTED}
        x, rho_curve = schedule_curve(setup, state.sampler_state)
        stratum_of = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(a) - 1)
        sched_mass = (
            np.bincount(stratum_of, rho_curve, len(a)) / np.maximum(np.bincount(stratum_of, None, len(a)), 1) * a
        )
        s["tv"]["schedule_vs_best_marginal"] = tv(sched_mass / sched_mass.sum(), fits["best marginal"])
        densities = {k: (v / a).tolist() for k, v in fits.items()}
        densities.update(edges=edges.tolist(), schedule_x=x.tolist(), schedule_rho=rho_curve.tolist())
        results["checkpoints"][str(step)] = dict(
            s,
            ci=ci,
            sd=sd,
            b_noise_uniform=b_noise,
            steps_model=model,
            densities=densities,
            G_mean_per_stratum=G.mean((0, 1)).tolist(),
            L_mean_per_stratum=L.mean((0, 1)).tolist(),
            seconds=time.perf_counter() - t1,
        )
        r = s["ratios"]
        plugin = r["best_marginal_over_best_per_image_plugin"]
        print(
            f"step {step}: M(sched)/M(best marg) {r.get('schedule_over_best_marginal', float('nan')):.3f}, "
            f"M(unif)/M(best marg) {r['uniform_over_best_marginal']:.3f}, M(best marg)/M(best per image) "
            f"{r['best_marginal_over_best_per_image']:.3f} (plug-in {plugin:.3f})"
            f"; |Eg|^2/M(u) {s['mean_grad_sq'] / s['M']['uniform']:.3g} ({time.perf_counter() - t1:.0f} s)",
            flush=True,
        )
    seconds = time.perf_counter() - t0
    md = tables(results, args, seconds)
    with open(os.path.join(args.out, "variance_ceiling.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(args.out, "variance_ceiling.json"), "w") as f:
        json.dump(dict(results, seconds=seconds), f)
    plot(results, os.path.join(args.out, "variance_ceiling.png"))
    print(md)
    print(f"\nWritten: {args.out}/variance_ceiling.md, .json, .png ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
