"""The project's packages form layers, and every import points down (or stays within a package): a new part can
rely on what is below it without pulling in what is above. Imports inside functions count."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# low to high; a unit imports only units of lower layers (or stays within itself). A unit is a package, or one
# module of a package whose modules sit on several layers: the config package's field types and registries are what
# every part declares its fields with, while its schema composes the parts' registries; evaluation's metrics are
# below the config (which checks the files they read). The drivers sit above what they drive: the training loop and
# --mode=eval hand the run they build (training/) to the evaluators (evaluation/).
LAYERS = [
    ("core", "config.fields", "config.registry"),  # field types, registries, app.run, the PyTorch-file reader
    ("diffusion", "models", "latent"),  # processes, networks, autoencoders, generation: arrays in, arrays out
    ("samplers", "weightings", "data"),  # parts that ask a process; datasets (and the first stage they train)
    ("evaluation",),  # the bound, FID/KID, feature spaces, classifiers, reference statistics, the periodic evaluation
    ("config",),  # the sections' fields, the schema composed from the parts, overrides, validation
    ("training",),  # the set-up, state, step, mesh, checkpoints, compile report, reports
    ("drivers",),  # the training loop, --mode=eval, what main.py runs
    ("configs", "benchmarks"),
]
LEVEL = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit(module: str) -> str:
    """The layer unit of a dotted module name: 'config.fields' for config.fields.X, 'config' for config.schema."""
    parts = module.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in LEVEL else parts[0]


def imports_of(path):
    """The project units a file imports (absolute imports, at any depth of the file)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(unit(node.module))
            out.update(unit(f"{node.module}.{a.name}") for a in node.names)  # from config import fields
        elif isinstance(node, ast.Import):
            out.update(unit(a.name) for a in node.names)
    return out & set(LEVEL)


def test_every_package_is_in_a_layer():
    packages = {d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py"))}
    assert packages - {"tests"} <= set(LEVEL), packages - set(LEVEL)


def test_units_of_a_split_package():
    assert unit("config.fields") == unit("config.fields.Int") == "config.fields"
    assert unit("config.schema") == unit("config") == "config"
    assert unit("training.setup") == "training" and unit("drivers.train.Loop") == "drivers"


def modules(package):
    """(path, dotted name) of every module of a package."""
    for d, _, files in os.walk(os.path.join(ROOT, package)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                yield path, os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")


def test_evaluation_and_training_meet_only_in_the_drivers():
    """The evaluators never import the trainer (the drivers hand them the run and its parameters), and training
    reaches evaluation only through the drivers."""
    crossing = [
        f"{name} imports {other}"
        for mine, theirs in (("evaluation", "training"), ("training", "evaluation"))
        for path, name in modules(mine)
        for other in imports_of(path)
        if other.split(".")[0] == theirs
    ]
    assert not crossing, crossing


def test_imports_point_down():
    upward = []
    for d, subdirs, files in os.walk(ROOT):
        if d == ROOT:
            subdirs[:] = [s for s in subdirs if s in LEVEL]
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
                own = unit(name)
                for other in imports_of(path):
                    within = other.split(".")[0] == own.split(".")[0] and LEVEL[other] == LEVEL[own]
                    if other != own and LEVEL[other] >= LEVEL[own] and not within:
                        upward.append(f"{os.path.relpath(path, ROOT)} imports {other}")
    assert not upward, upward
