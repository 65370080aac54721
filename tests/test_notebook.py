"""notebooks/quickstart.ipynb executed end to end in a real kernel, with a tiny model and a few steps."""

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT, TINY


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
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "step 2: loss" in text and "step 4: loss" in text  # two chunks, the second resumed from the first
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2 + 2  # a density plot per chunk, then samples and timesteps.png
    assert sorted(os.listdir(wd / "checkpoints")) == ["2", "4"] and (wd / "samples" / "step_0000004.png").exists()
