"""docs/extending.md's promise, kept: a new sampler and a new diffusion process are each one file, written exactly as
the page shows them, and nothing else is edited. The page's code blocks are copied into a copy of the repository,
`ruff check` passes on them with the project's settings, and main.py trains each one from the command line."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, tiny_flags

DOC = os.path.join(ROOT, "docs", "extending.md")
# the blocks of the page that are whole files: their first line names the file
FILES = ("samplers/my_sampler.py", "diffusion/my_bare_path.py")


def doc_files() -> dict:
    """{path: source} of the page's python blocks that begin with `# PATH` for a path of FILES."""
    blocks = re.findall(r"```python\n(.*?)```", open(DOC, encoding="utf-8").read(), re.S)
    out = {}
    for block in blocks:
        first = block.split("\n", 1)[0]
        if first.startswith("# ") and first[2:].strip() in FILES:
            out[first[2:].strip()] = block
    return out


def test_the_page_shows_both_files_whole():
    files = doc_files()
    assert sorted(files) == sorted(FILES)
    assert "@SAMPLERS.register" in files["samplers/my_sampler.py"]
    assert "@PROCESSES.register" in files["diffusion/my_bare_path.py"]


def test_importing_every_part_starts_no_jax_backend():
    """The packages import all their part modules (config.registry.import_parts); a module that computed a jnp array
    at import would start XLA's backend, after which a multi-process run can no longer call
    jax.distributed.initialize (main.py does so after its imports)."""
    code = (
        "import samplers, weightings, models, data, diffusion, config.schema\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge._backends, sorted(xla_bridge._backends)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
def test_a_sampler_and_a_process_added_as_the_page_says_train_from_the_command_line(tmp_path):
    repo = tmp_path / "repo"
    skip = shutil.ignore_patterns(".git", "workdirs", "latents", "__pycache__", ".pytest_cache", "records", "*.ipynb")
    shutil.copytree(ROOT, repo, ignore=skip)
    for path, source in doc_files().items():
        (repo / path).write_text(source)
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", *FILES], cwd=repo, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    def train(name, *flags):
        cmd = [sys.executable, "main.py", "--config=configs/default.py", f"--workdir={tmp_path / name}"]
        cmd += [*tiny_flags(**{"train.num_steps": 2}), *flags]
        r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        records = [json.loads(line) for line in open(tmp_path / name / "metrics.jsonl")]
        return max(r["step"] for r in records if "loss" in r)

    assert train("sampler", "--config.sampler.name=my_sampler", "--config.sampler.my_sampler.bins=20") == 2
    assert train("process", "--config.diffusion.name=my_bare_path", "--config.sampler.name=uniform") == 2
