"""The weighting ceiling's picture: from the records of a grid of fixed time distributions (benchmarks/tables56.sh),
each arm's density over t / T beside its final test bits/dim and FID, paired with uniform seed by seed.

    python benchmarks/weighting_ceiling.py --records=benchmarks/records/ddpm56 \
        --out=benchmarks/results/weighting_ceiling_ddpm

Reads only the records (RUN_seedS/eval/step_*.json and run_config.json); writes OUT.png and OUT.md. Left panel: the
density q(u) of every fixed arm (a `beta` run: Beta(a, b) of u = t / T; uniform: 1), coloured by its mean paired
difference in bits/dim to uniform over the seeds both have (blue lower, red higher; beyond 0.5 the end
colours). Right panel: every arm's paired differences to uniform,
bits/dim against FID, one dot per seed and a cross at the mean: the lower left corner is better on both. The table
lists per arm the seeds, the mean differences and the number of seeds worse than uniform on each metric. Pairs are
the seeds both runs have; this picture does not check fingerprints (benchmarks/samplers.py's table does, and names
what it leaves out).
"""

import argparse
import json
import os
import re
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.samplers import final_metrics  # noqa: E402

BASE = "uniform"


def read(records):
    """{arm: {seed: (bpd, fid, config)}} from the records' final eval JSONs."""
    out = {}
    for entry in sorted(os.listdir(records)):
        m = re.fullmatch(r"(.+)_seed(\d+)", entry)
        ev_dir = os.path.join(records, entry, "eval")
        if not m or not os.path.isdir(ev_dir):
            continue
        final = final_metrics(os.path.join(records, entry))
        with open(os.path.join(records, entry, "run_config.json")) as f:
            cfg = json.load(f)
        arm = re.sub(r"__([a-z_0-9]+)-", r"/\1=", m.group(1))  # the run's name, as samplers.py's --runs wrote it
        out.setdefault(arm, {})[int(m.group(2))] = (final["final_bpd"], final["fid_final"], cfg)
    return out


def beta_of(cfg):
    """(a, b) of a fixed Beta run without weights, (1, 1) for uniform with weight 1, None for any other arm."""
    s, w = cfg["sampler"], cfg.get("weighting", {}).get("name", "none")
    if w != "none":
        return None
    if s["name"] == "uniform":
        return 1.0, 1.0
    if s["name"] == "beta" and not s["beta"].get("importance_weights", False):
        return float(s["beta"]["a"]), float(s["beta"]["b"])
    return None


def paired(runs, arm, index):
    seeds = sorted(set(runs[arm]) & set(runs[BASE]))
    d = [runs[arm][s][index] - runs[BASE][s][index] for s in seeds]
    return seeds, np.array([x for x in d if x is not None], np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", required=True)
    ap.add_argument("--out", required=True, help="path without extension: OUT.png and OUT.md are written")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    runs = read(args.records)
    if BASE not in runs:
        sys.exit(f"error: --records={args.records} holds no {BASE} run (RUN_seedS/eval/step_*.json)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    rows, fixed = [], []
    for arm in runs:
        if arm == BASE:
            continue
        seeds, db = paired(runs, arm, 0)
        _, df = paired(runs, arm, 1)
        ab = beta_of(next(iter(runs[arm].values()))[2])
        rows.append((arm, seeds, db, df))
        if ab is not None:
            fixed.append((arm, ab, db.mean()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    u = np.linspace(0.0025, 0.9975, 400)
    cmap, norm = plt.cm.coolwarm, matplotlib.colors.Normalize(-0.5, 0.5, clip=True)  # beyond +-0.5: the ends' colours
    left.plot(u, np.ones_like(u), color="black", lw=2, label=f"{BASE} (Beta(1, 1))")
    for _arm, (a, b), m in sorted(fixed, key=lambda r: r[2]):
        left.plot(u, stats.beta.pdf(u, a, b), color=cmap(norm(m)), lw=1.5, label=f"Beta({a:g}, {b:g}): {m:+.3f}")
    left.set(xlabel="u = t / T", ylabel="density", yscale="log", ylim=(0.05, 30), title="fixed arms: Δ bits/dim")
    left.legend(fontsize=7)
    for i, (arm, _, db, df) in enumerate(rows):
        c = plt.cm.tab20(i % 20)
        n = min(len(db), len(df))
        right.scatter(db[:n], df[:n], color=c, s=14, alpha=0.6)
        right.scatter([db.mean()], [df.mean() if len(df) else np.nan], color=c, marker="x", s=70, label=arm)
    right.axhline(0, color="grey", lw=0.8)
    right.axvline(0, color="grey", lw=0.8)
    right.set(xlabel=f"Δ final test bits/dim vs {BASE}", ylabel=f"Δ FID vs {BASE}", title="per seed (dots), mean (x)")
    right.set_xscale("symlog", linthresh=0.5)
    right.set_yscale("symlog", linthresh=0.3)
    right.legend(fontsize=6, loc="upper left")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=100)
    lines = [
        f"Paired with {BASE} seed by seed (records: `{os.path.relpath(args.records, ROOT)}`); "
        f"{BASE}: bits/dim {np.mean([v[0] for v in runs[BASE].values()]):.3f}, "
        f"FID {np.mean([v[1] for v in runs[BASE].values()]):.3f} over seeds {sorted(runs[BASE])}.",
        "",
        "| arm | seeds | Δ bits/dim (mean) | worse on bits/dim | Δ FID (mean) | worse on FID |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds, db, df in sorted(rows, key=lambda r: r[2].mean()):
        lines.append(
            f"| {arm} | {','.join(map(str, seeds))} | {db.mean():+.3f} | {int(np.sum(db > 0))}/{len(db)} | "
            f"{df.mean():+.3f} | {int(np.sum(df > 0))}/{len(df)} |"
        )
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"Written: {args.out}.png, {args.out}.md")


if __name__ == "__main__":
    main()
