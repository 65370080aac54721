"""The notebooks executed end to end in a real kernel, with tiny models and a few steps."""

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT, TINY


def execute(name):
    nb = nbformat.read(os.path.join(ROOT, "notebooks", name), as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}}
    ).execute()
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_quickstart_notebook_runs_end_to_end(tmp_path, monkeypatch):
    wd = tmp_path / "nb"
    monkeypatch.setenv("QUICKSTART_STEPS", "4")
    monkeypatch.setenv("QUICKSTART_CHUNKS", "2")
    monkeypatch.setenv("QUICKSTART_WORKDIR", str(wd))
    monkeypatch.setenv(
        "QUICKSTART_OVERRIDES",
        json.dumps({k: v for k, v in TINY.items() if not k.startswith("train.")} | {"train.batch_size": 16}),
    )
    outputs = execute("quickstart.ipynb")
    text = "".join(o.get("text", "") for o in outputs)
    assert "step 2: loss" in text and "step 4: loss" in text  # two chunks, the second resumed from the first
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2 + 2  # a density plot per chunk, then samples and timesteps.png
    assert sorted(os.listdir(wd / "checkpoints")) == ["2", "4"] and (wd / "samples" / "step_0000004.png").exists()


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_text_notebook_trains_samples_and_evaluates(tmp_path, monkeypatch):
    """Two chunks of two steps of a tiny masked diffusion LM: a validation NELBO and text samples at each chunk's
    end (the second chunk resumed from the first), then the test bound in bits per character."""
    wd = tmp_path / "nb"
    monkeypatch.setenv("TEXT_STEPS", "4")
    monkeypatch.setenv("TEXT_CHUNKS", "2")
    monkeypatch.setenv("TEXT_WORKDIR", str(wd))
    monkeypatch.setenv("TEXT_TEST_SEQUENCES", "8")
    tiny = {"data.name": "tiny_text", "data.seq_len": 16, "model.hidden_size": 16, "model.depth": 1}
    tiny |= {"model.num_heads": 2, "train.batch_size": 8, "train.warmup_steps": 2, "sample.num": 4}
    tiny |= {"sample.steps": 4, "eval.periodic.steps": 4, "eval.periodic.nll_images": 8}
    tiny |= {"eval.periodic.nll_timesteps": 4, "diffusion.likelihood_steps": 4}
    monkeypatch.setenv("TEXT_OVERRIDES", json.dumps(tiny))
    outputs = execute("text.ipynb")
    text = "".join(o.get("text", "") for o in outputs)
    nelbos = [float(s.split(" bits")[0]) for s in text.split("validation NELBO ")[1:]]
    assert "step 2: validation NELBO" in text and "step 4: validation NELBO" in text and len(nelbos) == 2
    assert all(3.0 < v < 5.5 for v in nelbos), nelbos  # near log2(27) = 4.75 after so few steps
    assert "samples (step_0000002.txt)" in text and "samples (step_0000004.txt)" in text
    lines = [s.strip() for s in open(wd / "samples" / "step_0000004.txt").read().splitlines()]
    assert len(lines) == 4 and all(len(s) == 16 and set(s) <= set(" abcdefghijklmnopqrstuvwxyz") for s in lines)
    assert "checkpoint 4: test NLL <= " in text and " bits per token (+- " in text and ", 8 sequences, " in text
    assert sorted(os.listdir(wd / "checkpoints")) == ["2", "4"] and (wd / "eval" / "step_0000004.json").exists()
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the NELBO curve and per_timestep_loss.png
