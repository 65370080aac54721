"""Each function compiled once: a run with several periodic evaluations traces the sampling and bound functions
once per shape (they are built once and kept on the Setup), and the train step once."""

import json

from conftest import tiny_config


def test_periodic_evaluations_trace_sampling_and_bound_once(tmp_path):
    from core.traces import TRACES
    from drivers.train import train

    c = tiny_config(
        **{
            "train.num_steps": 6,
            "train.ckpt_every": 6,
            "eval.periodic.every": 2,
            "eval.periodic.nll_images": 16,
            "eval.periodic.nll_timesteps": 4,
            "eval.periodic.num_samples": 16,
            "eval.periodic.steps": 3,
            "sampler.name": "uniform",
        }
    )
    TRACES.clear()
    train(c, str(tmp_path / "wd"))
    rows = [json.loads(line) for line in open(tmp_path / "wd" / "metrics.jsonl")]
    assert [r["step"] for r in rows if "periodic/seconds" in r] == [2, 4, 6]  # three periodic evaluations
    traces = dict(TRACES)
    bound = {k: v for k, v in traces.items() if k[0] == "bound"}
    sample = {k: v for k, v in traces.items() if k[0] == "sample"}
    assert list(bound.values()) == [1], traces  # one batch shape, one trace for three evaluations
    # the periodic FID samples (DDIM-3, 16) and the final grid (DDIM-5, 8 = 4 padded to the 8 devices): once each
    want = [("sample", "ddim", 3, (16, 8, 8, 1), 1.0), ("sample", "ddim", 5, (8, 8, 8, 1), 1.0)]
    assert sorted(sample) == want, traces
    assert set(sample.values()) == {1}, traces
    assert {k: v for k, v in traces.items() if k[0] == "step"} == {("step", None): 1}  # the train step too
