"""The project's packages form layers, and every import points down (or stays within a package): a new part can
rely on what is below it without pulling in what is above. Imports inside functions count."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# low to high; a package imports only packages of lower layers
LAYERS = [
    ("core",),  # field specs, registries, the PyTorch-file reader
    ("diffusion", "models", "latent"),  # processes, networks, autoencoders: arrays in, arrays out
    ("samplers", "weightings", "data"),  # parts that ask a process; datasets (and the first stage they train)
    ("evaluation",),
    ("training",),
    ("configs", "benchmarks"),
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def imports_of(path):
    """The top-level project packages a file imports (absolute imports, at any depth of the file)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
    return out & set(LEVEL)


def test_every_package_is_in_a_layer():
    packages = {d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py"))}
    assert packages - {"tests"} <= set(LEVEL), packages - set(LEVEL)


def test_imports_point_down():
    upward = []
    for pkg, level in LEVEL.items():
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    for other in imports_of(path):
                        if other != pkg and LEVEL[other] >= level:
                            upward.append(f"{os.path.relpath(path, ROOT)} imports {other}")
    assert not upward, upward
