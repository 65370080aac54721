"""What the learned sampler's reward carries: train with `diagnostics=True` and a log record at every policy update,
then summarise, per variant, the reward and the policy gradient over training
(docs/benchmarks/reward.md#what-the-reward-carries).

    python benchmarks/reward.py --config=configs/default.py --out=workdirs/reward_ddpm \
        --variants=adaptive,adaptive/data_end=exclude,adaptive/selection=stratified/data_end=exclude
    python benchmarks/reward.py --config=configs/flow.py --out=workdirs/reward_flow
    python benchmarks/reward.py --config=configs/mnist_latent.py:dit --out=workdirs/reward_latent --steps=1000

A variant is adaptive[/FIELD=VALUE...] (fields of config.sampler.adaptive, read as benchmarks/samplers.py --runs
reads them). Each trains in OUT/VARIANT (python main.py, periodic evaluation off, train.log_every = the sampler's
update_every, so that metrics.jsonl holds every update; an interrupted variant resumes, a finished one is skipped),
with --steps steps (default: the config's) and --set overrides. Written to OUT: reward.md (one table per variant)
and reward.png. Per variant, over the updates after the first --skip (the buffer filling):
- reward mean and sign: the mean over probe images of R_i per update; how often it is negative;
- the reward's spread across images over its mean (|mean| / sd per update, the median): the REINFORCE signal;
- per probe time s (grouped by the grid time it held): how often it was in S, the mean and the spread across images
  of its term, and its share of the reward's variance across images (Cov(d_s, R) / Var(R), the shares of one
  update sum to 1);
- the policy gradient's signal-to-noise ratio per layer (samplers/adaptive.py _diagnostics: the mean per-image
  REINFORCE gradient's length over the per-image spread), median over updates: per-image gradients with no common
  direction give about 1 / sqrt(P) (the mean of P independent draws), a mean that stands out of its noise 2 / sqrt(P)
  or more;
- the entropy term's gradient over the reward's (their lengths' ratio, median): above 1 the regulariser steers;
- the policy: its final TV from uniform and mean u (sampler/policy_density, as benchmarks/samplers.py).
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.samplers import (  # noqa: E402
    as_given,
    density_summary,
    load_config,
    measured_here,
    parse_setting,
    setting_flag,
    timed,
)
from core.fingerprint import without_paths  # noqa: E402


def parse_variants(text):
    """[(name, [FIELD=VALUE])] of --variants; exits with one line on a bad one."""
    out = []
    for name in text.split(","):
        spec, *settings = name.split("/")
        if spec != "adaptive":
            sys.exit(f"error: --variants: {name!r} must start with adaptive (the learned sampler)")
        for s in settings:
            try:
                parse_setting("adaptive", s)
            except ValueError as e:
                sys.exit(f"error: --variants: {name!r}: {e}")
        out.append((name, settings))
    return out


def variant_dir(out, name):
    return os.path.join(out, name.replace("/", "__").replace("=", "-"))


def train(out, name, settings, args):
    """Train one variant (resuming, or skipped when its last checkpoint is at the final step)."""
    wd = variant_dir(out, name)
    c = load_config(args.config, args.set)
    steps = args.steps or int(c.train.num_steps)
    every = int(c.sampler.adaptive.update_every)
    for s in settings:
        if s.startswith("update_every="):
            every = int(s.partition("=")[2])
    ckpts = os.path.join(wd, "checkpoints")
    if os.path.isdir(ckpts) and str(steps) in os.listdir(ckpts):
        print(f"{name}: already trained", flush=True)
        return wd
    flags = [
        f"--config={os.path.join(ROOT, args.config)}",
        f"--workdir={wd}",
        "--config.sampler.name=adaptive",
        "--config.sampler.adaptive.diagnostics=True",
        f"--config.train.num_steps={steps}",
        f"--config.train.log_every={every}",
        "--config.eval.periodic.every=0",
        *[setting_flag("adaptive", s) for s in settings],
        *[f"--config.{s}" for s in args.set],
    ]
    os.makedirs(wd, exist_ok=True)
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), *flags]
    rc, seconds = timed(cmd, os.path.join(wd, "train.log"), os.path.join(wd, "bench_seconds.json"), "train")
    if rc:
        sys.exit(f"error: {name} failed (exit {rc}); log: {wd}/train.log")
    print(f"{name}: trained in {seconds:.0f} s", flush=True)
    return wd


def updates(wd):
    """The records of metrics.jsonl that follow a policy update (sampler/updates grew), in order."""
    recs, seen = [], 0
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            n = r.get("sampler/updates")
            if n is not None and n > seen and "sampler/reward_per_image" in r:
                recs.append(r)
                seen = n
    return recs


def summarise(recs, skip, stratified=False):
    """The figures of the module docstring for one variant's update records (with fresh strata every update, the
    terms are grouped by stratum rather than by time)."""
    recs = recs[skip:]
    if not recs:
        return None
    R = np.array([r["sampler/reward_per_image"] for r in recs])  # [U, P]
    P = R.shape[1]
    mean, sd = R.mean(1), R.std(1)
    per_s = {}
    for r in recs:
        for k, (s, m, d, share) in enumerate(
            zip(
                r["sampler/S"], r["sampler/reward_per_s"], r["sampler/reward_sd_per_s"], r["sampler/reward_share_per_s"]
            )
        ):
            per_s.setdefault(f"stratum {k}" if stratified else f"{s:g}", []).append((m, d, share))
    rows = sorted(per_s.items(), key=lambda kv: -len(kv[1]))
    snr = np.array([r["sampler/grad_snr"] for r in recs])
    mean_u, tv = density_summary(recs[-1]["sampler/policy_density"])
    return dict(
        updates=len(recs),
        steps=(recs[0]["step"], recs[-1]["step"]),
        probe=P,
        reward_mean=float(np.mean(mean)),
        reward_negative=float(np.mean(mean < 0)),
        reward_snr=float(np.median(np.abs(mean) / np.maximum(sd, 1e-30))),
        per_s=[
            dict(
                s=s,
                share_of_updates=len(v) / len(recs),
                mean=float(np.mean([x[0] for x in v])),
                spread=float(np.mean([x[1] for x in v])),
                variance_share=float(np.mean([x[2] for x in v])),
            )
            for s, v in rows
        ],
        grad_snr=np.median(snr, 0).tolist(),
        grad_snr_noise_level=2 / np.sqrt(P),
        entropy_to_reward_grad=float(np.median([r["sampler/entropy_to_reward_grad"] for r in recs])),
        final_tv=tv,
        final_mean_u=mean_u,
        S=[r["sampler/S"] for r in recs],
        curve=dict(
            step=[r["step"] for r in recs],
            mean=mean.tolist(),
            sd=sd.tolist(),
            snr=snr.tolist(),
            share_first=[r["sampler/reward_share_per_s"][int(np.argmin(r["sampler/S"]))] for r in recs],
        ),
    )


def section(name, s, layers, config):
    if s is None:
        return f"### {name}\n\nno update records yet\n"
    lines = [
        f"### {name}",
        "",
        f"{config}, updates {s['updates']} (steps {s['steps'][0]} to {s['steps'][1]}), {s['probe']} probe images. "
        f"Mean reward {s['reward_mean']:+.3g} bits/dim, negative at {100 * s['reward_negative']:.0f}% of updates; "
        f"|mean| / spread across images (median) {s['reward_snr']:.3f}. Policy gradient SNR per layer (median; "
        f"a gradient with no signal gives about 1/sqrt(P) = {s['grad_snr_noise_level'] / 2:.2f}, a clear signal "
        f"2/sqrt(P) = {s['grad_snr_noise_level']:.2f} or more): "
        + ", ".join(f"{k} {v:.3f}" for k, v in zip(layers, s["grad_snr"]))
        + f". Entropy gradient / reward gradient (median) {s['entropy_to_reward_grad']:.2f}. "
        f"Final policy: TV from uniform {s['final_tv']:.3f}, mean u {s['final_mean_u']:.3f}.",
        "",
        "| time in S (or stratum) | share of updates | mean term (bits/dim) | spread across images | share of the "
        "reward's variance |",
        "|---|---|---|---|---|",
    ]
    for r in s["per_s"][:8]:
        lines.append(
            f"| {r['s']} | {100 * r['share_of_updates']:.0f}% | {r['mean']:+.3g} | {r['spread']:.3g} | "
            f"{100 * r['variance_share']:.1f}% |"
        )
    if len(s["per_s"]) > 8:
        lines.append(f"| ({len(s['per_s']) - 8} more) | | | | |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, s in results.items():
        if s is None:
            continue
        c = s["curve"]
        axes[0].plot(c["step"], np.abs(np.array(c["mean"])) / np.maximum(c["sd"], 1e-30), label=name, lw=1)
        axes[1].plot(c["step"], np.median(c["snr"], axis=1), label=name, lw=1)
        axes[2].plot(c["step"], 100 * np.array(c["share_first"]), label=name, lw=1)
    axes[0].set(title="reward: |mean| / spread across probe images", xlabel="step", yscale="log")
    axes[1].set(title="policy gradient SNR (median over layers)", xlabel="step", yscale="log")
    level = next(s for s in results.values() if s)["grad_snr_noise_level"]
    axes[1].axhline(level, color="k", ls=":", lw=1, label="2 / sqrt(P)")
    axes[1].axhline(level / 2, color="k", ls="--", lw=1, label="1 / sqrt(P): no signal")
    axes[2].set(title="% of the reward's variance owed to the smallest time in S", xlabel="step")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/default.py")
    ap.add_argument("--out", default=os.path.join(ROOT, "workdirs", "reward"))
    ap.add_argument("--variants", default="adaptive")
    ap.add_argument("--steps", type=int, default=0, help="train.num_steps (0: the config's)")
    ap.add_argument("--skip", type=int, default=2, help="updates left out at the start (the sweep buffer filling)")
    ap.add_argument("--set", action="append", default=[], help="FIELD=VALUE of the config, for every variant")
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    results, layers = {}, None
    for name, settings in variants:
        wd = train(args.out, name, settings, args)
        results[name] = summarise(updates(wd), args.skip, "selection=stratified" in settings)
        if layers is None:  # the policy's modules in sorted order, as _diagnostics reports them
            a = load_config(args.config, args.set).sampler.adaptive
            n_conv, n_dense = len(a.policy_channels), len(a.policy_hidden) + 1
            layers = sorted([f"Conv_{i}" for i in range(n_conv)] + [f"Dense_{i}" for i in range(n_dense)])
    with open(os.path.join(args.out, "reward.json"), "w") as f:  # with what it was measured on (no machine's path)
        measured = measured_here(load_config(args.config, args.set))
        json.dump(dict(runs=results, measured_with=measured, arguments=as_given(args)), f)
    cmd = "`python benchmarks/reward.py " + without_paths(" ".join(sys.argv[1:])) + "`\n\n"
    md = cmd + "\n".join(section(n, s, layers, args.config) for n, s in results.items())
    with open(os.path.join(args.out, "reward.md"), "w") as f:
        f.write(md)
    plot(results, os.path.join(args.out, "reward.png"))
    print(md)


if __name__ == "__main__":
    main()
