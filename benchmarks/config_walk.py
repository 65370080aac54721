"""Follow the config from train(): every call of a project function that is handed the config (or one of its
sections) while train() builds the run, checks the workdir's identity and opens its checkpoints, in call order,
leaving out the parts' own code (data/, models/, diffusion/, samplers/, weightings/, latent/, and the FID feature
spaces of evaluation/features.py: their checks, reached through their registries or the eval section's check, are
where a reader expects them). Prints the walk as the packages it passes
through and how often it climbs back up: a call into a package of a higher layer (tests/test_layers.py; a package
split over several layers counts at its lowest) than the one the walk was just in, i.e. the reader returns from
below to go on above.

    python benchmarks/config_walk.py [--show]
"""

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ml_collections  # noqa: E402

from tests import test_layers  # noqa: E402

PARTS = ("data", "models", "diffusion", "samplers", "weightings", "latent", "evaluation.features")
# a package's layer: its lowest unit's (config: its field types and registries)
LEVEL = {}
for name, level in sorted(test_layers.LEVEL.items(), key=lambda kv: -kv[1]):
    LEVEL[name.split(".")[0]] = level


def holds_config(frame) -> bool:
    code = frame.f_code
    args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
    return any(isinstance(a, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)) for a in args)


def walk(config, workdir):
    """[(unit, function)] of the calls handed the config, in order."""
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
        build(config)
        ckpt.check_run_identity(config, workdir)
        mngr = ckpt.make_manager(config, workdir)
        mngr.latest_step(), mngr.wait_until_finished(), mngr.close()
    finally:
        sys.setprofile(None)
    return calls


def climbs(calls):
    """The packages in walk order (repeats merged) and the steps up."""
    units = [u for i, (u, _) in enumerate(calls) if i == 0 or calls[i - 1][0] != u]
    ups = [(a, b) for a, b in zip(units, units[1:]) if LEVEL.get(b, -1) > LEVEL.get(a, -1)]
    return units, ups


def main():
    import importlib

    config = importlib.import_module("configs.default").get_config()  # as the other benchmarks load config files
    calls = walk(config, tempfile.mkdtemp(prefix="config_walk_"))  # kept: orbax's threads may still look
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
