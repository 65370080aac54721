"""Follow the config from a driver: every call of a project function that is handed the config (or one of its
sections) while train() builds the run, checks the workdir's identity and opens its checkpoints, or with --eval
while the eval driver (drivers/evaluate.py evaluate) evaluates a checkpoint (the default config's initial state,
with a small evaluation: EVAL), in call order, leaving out the parts' own code (data/, models/, diffusion/,
samplers/, weightings/, latent/, and the FID feature spaces of evaluation/features.py: their checks, reached
through their registries or the eval section's check, are where a reader expects them). Prints the walk as the
packages it passes through and how often it climbs back up: a call into a package of a higher layer
(tests/test_layers.py; a package split over several layers counts at its lowest) than the one the walk was just in,
i.e. the reader returns from below to go on above.

    python benchmarks/config_walk.py [--eval] [--show]
"""

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ml_collections  # noqa: E402

from tests import test_layers  # noqa: E402

PARTS = ("data", "models", "diffusion", "samplers", "weightings", "latent", "evaluation.features")
# --eval: the evaluation's sizes, small (the walk counts calls, not work)
EVAL = {
    "eval.nll_images": 16,
    "eval.num_samples": 8,
    "eval.fid.num_samples": 16,
    "eval.fid.method": "ddim",
    "eval.fid.steps": 5,
    "sample.method": "ddim",
    "sample.steps": 5,
}
# a package's layer: its lowest unit's (config: its field types and registries)
LEVEL = {}
for name, level in sorted(test_layers.LEVEL.items(), key=lambda kv: -kv[1]):
    LEVEL[name.split(".")[0]] = level


def holds_config(frame) -> bool:
    code = frame.f_code
    args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
    return any(isinstance(a, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)) for a in args)


def walk(config, workdir, driver=None):
    """[(unit, function)] of the calls handed the config, in order: of driver(config, workdir), or (None) of what
    train() does before its loop."""
    from training import checkpoint as ckpt
    from training.setup import build

    calls = []

    def profile(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(ROOT) or "/tests/" in path or path.endswith("config_walk.py"):
            return
        module = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
        if module.split(".")[0] not in PARTS and module not in PARTS and holds_config(frame):
            calls.append((module.split(".")[0], f"{module}.{frame.f_code.co_name}"))

    sys.setprofile(profile)
    try:
        if driver is not None:
            driver(config, workdir)
        else:
            build(config)
            ckpt.check_run_identity(config, workdir)
            mngr = ckpt.make_manager(config, workdir)
            mngr.latest_step(), mngr.wait_until_finished(), mngr.close()
    finally:
        sys.setprofile(None)
    return calls


def initial_checkpoint(config, workdir):
    """Write the config's initial state as checkpoint 0 of `workdir` (outside the walk), for the eval driver."""
    from training import checkpoint as ckpt
    from training.setup import build, initial_state

    ckpt.check_run_identity(config, workdir)
    mngr = ckpt.make_manager(config, workdir)
    ckpt.save(mngr, 0, initial_state(build(config)))
    mngr.wait_until_finished(), mngr.close()


def climbs(calls):
    """The packages in walk order (repeats merged) and the steps up."""
    units = [u for i, (u, _) in enumerate(calls) if i == 0 or calls[i - 1][0] != u]
    ups = [(a, b) for a, b in zip(units, units[1:]) if LEVEL.get(b, -1) > LEVEL.get(a, -1)]
    return units, ups


def main():
    import importlib

    config = importlib.import_module("configs.default").get_config()  # as the other benchmarks load config files
    workdir = tempfile.mkdtemp(prefix="config_walk_")  # kept: orbax's threads may still look
    driver = None
    if "--eval" in sys.argv:
        from config.fields import override
        from drivers.evaluate import evaluate

        config = override(config, EVAL)
        initial_checkpoint(config, workdir)
        driver = evaluate
    calls = walk(config, workdir, driver)
    units, ups = climbs(calls)
    if "--show" in sys.argv:
        for u, name in calls:
            print(f"  {u:22s} {name}")
    print(" -> ".join(units))
    print(f"{len(calls)} calls handed the config, {len(units)} stretches in one package, {len(ups)} climbs back up:")
    for a, b in ups:
        print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
