"""Bit-identity of a refactor: the same short runs from two checkouts, compared record by record.

    git worktree add /tmp/before COMMIT
    python benchmarks/identity.py --before=/tmp/before [--after=.] [--out=/tmp/identity] [--steps=20]

Each setting (SETTINGS: the quickstart's default with the learned sampler, flow matching, EDM and VP (its fixed and
learned schedules) with the learned sampler, the default with the learned sampler's options on, its other rewards,
the gradient-variance sampler and a class-conditional model) trains the tests' tiny model (tests/conftest.py TINY)
for --steps steps from both checkouts, on 8 CPU devices, and compares every metrics record without its clock
fields, every checkpoint array (restored by its own metadata; a learned sampler's state of the layout before
PolicyState is matched by samplers/policy_state.py PolicyState.LEGACY_NAMES) and the sample pictures byte for byte. A
finished run is not run again (use a fresh --out after a change). Prints one line per setting; exits 1 if anything
differs."""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), ROOT]

LEARNED = ["--config.sampler.name=adaptive"]
SETTINGS = {
    "default": ("default.py", []),
    "flow": ("flow.py", [*LEARNED, "--config.sample.method=euler"]),
    "edm": ("edm.py", [*LEARNED, "--config.sample.method=euler"]),
    "vp": ("default.py", ["--config.diffusion.name=vp"]),
    "vp_learned": (  # VDM's learned schedule, which needs the learned sampler's importance weights
        "default.py",
        [
            "--config.diffusion.name=vp",
            "--config.diffusion.schedule=learned",
            "--config.sampler.adaptive.importance_weights=True",
        ],
    ),
    "options": (
        "default.py",
        [
            f"--config.sampler.adaptive.{k}"
            for k in ("advantage=normalised", "entropy_control=target", "trust_kl=0.01", "diagnostics=True")
        ],
    ),
    # the learned sampler's other rewards: the training objective's rows, and per-image credit with the decoder
    "loss_reward": ("default.py", ["--config.sampler.adaptive.reward=loss"]),
    "credit": (
        "default.py",
        [
            f"--config.sampler.adaptive.{k}"
            for k in ("reward=credit", "selection=stratified", "data_end=decoder", "advantage=normalised")
        ],
    ),
    # single examples' gradients (StepContext.objective), and a class-conditional model with guidance
    "grad_variance": ("default.py", ["--config.sampler.name=grad_variance"]),
    "conditional": ("default.py", ["--config.model.class_cond=True", "--config.sample.guidance_scale=2.0"]),
}


def clock(key: str) -> bool:
    return "seconds" in key or key.endswith("_s") or "time" in key or "per_sec" in key


def train(root, workdir, config, extra, steps):
    from conftest import tiny_flags

    if os.path.exists(os.path.join(workdir, "samples")):
        return
    flags = tiny_flags(**{"train.num_steps": steps, "train.ckpt_every": steps // 2, "train.log_every": steps // 4})
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    cmd = [sys.executable, "main.py", f"--config=configs/{config}", f"--workdir={workdir}", *flags, *extra]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"error: {' '.join(cmd)} in {root} failed: {r.stderr.strip().splitlines()[-1]}")


def arrays(workdir, step):
    """{path: array} of a checkpoint, the learned sampler's fields under their names before PolicyState."""
    import jax
    import numpy as np

    from conftest import restore_checkpoint
    from samplers.policy_state import PolicyState

    _, state = restore_checkpoint(workdir, step)
    old = PolicyState.LEGACY_NAMES
    if isinstance(state.get("sampler_state"), dict):
        state["sampler_state"] = {old.get(k, k): v for k, v in state["sampler_state"].items()}
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(state)}


def compare(a, b):
    """(number of things compared, [differences])."""
    import numpy as np

    def rows(d):
        with open(os.path.join(d, "metrics.jsonl")) as f:
            return [{k: v for k, v in json.loads(line).items() if not clock(k)} for line in f]

    def content(*path):
        with open(os.path.join(*path), "rb") as f:
            return f.read()

    ra, rb = rows(a), rows(b)
    diffs = [] if len(ra) == len(rb) else [f"{len(ra)} metrics records against {len(rb)}"]
    diffs += [
        f"metrics record {i}: {k}"
        for i, (x, y) in enumerate(zip(ra, rb))
        for k in set(x) | set(y)
        if x.get(k) != y.get(k)
    ]
    n = len(ra)
    steps = sorted(int(s) for s in os.listdir(os.path.join(a, "checkpoints")) if s.isdigit())
    for step in steps:
        xa, xb = arrays(a, step), arrays(b, step)
        diffs += [f"checkpoint {step}: {k} in one only" for k in sorted(set(xa) ^ set(xb))]
        diffs += [f"checkpoint {step}: {k}" for k in sorted(set(xa) & set(xb)) if not np.array_equal(xa[k], xb[k])]
        n += len(xa)
    for f in sorted(os.listdir(os.path.join(a, "samples"))):
        diffs += [] if content(a, "samples", f) == content(b, "samples", f) else [f"samples/{f}"]
        n += 1
    return n, diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="a checkout of the commit before the change")
    ap.add_argument("--after", default=ROOT)
    ap.add_argument("--out", default="/tmp/identity")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    args = ap.parse_args()
    failed = False
    for name in args.settings.split(","):
        config, extra = SETTINGS[name]
        dirs = [os.path.join(args.out, side, name) for side in ("before", "after")]
        for root, wd in zip((args.before, args.after), dirs):
            train(os.path.abspath(root), wd, config, extra, args.steps)
        n, diffs = compare(*dirs)
        failed |= bool(diffs)
        print(
            f"{name}: {n} metrics records, checkpoint arrays and pictures compared; differences: {diffs[:10] or 'none'}"
        )
    sys.exit(int(failed))


if __name__ == "__main__":
    main()
