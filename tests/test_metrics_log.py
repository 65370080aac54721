"""metrics.jsonl survives a crash: a log whose last record was cut at any byte (a process killed mid-write, a full
disk) is repaired when the run resumes, and the resumed run's log equals an uninterrupted run's."""

import json
import os
import shutil

import pytest

from training import report

TIMING = ("steps_per_sec", "train_seconds")  # wall-clock: differs between any two runs


def records(n):
    """n records as MetricWriter writes them (a scalar with many digits, an array, a key with a slash)."""
    return [
        {"step": 10 * (i + 1), "loss": 0.1 / (i + 3), "t_hist": [i, 2, 3], "sampler/x": -1.5e-7 * i} for i in range(n)
    ]


def lines(rows):
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def parse(path):
    """Every line of a JSON-lines file as an object (raises on a line that is not one)."""
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_a_log_cut_at_every_byte_of_its_last_record_is_repaired_and_the_next_record_parses(tmp_path):
    rows = records(3)
    whole = lines(rows)
    start = len(lines(rows[:2]))  # the first byte of the last record
    path = str(tmp_path / "metrics.jsonl")
    nxt = {"step": 40, "loss": 0.01}
    for cut in range(start, len(whole) + 1):
        with open(path, "wb") as f:
            f.write(whole[:cut])
        report.truncate_metrics(path, last_step=30)
        # the last record survives only when nothing of it but (at most) its newline was cut
        kept = rows if cut >= len(whole) - 1 else rows[:2]
        assert parse(path) == kept, cut
        with open(path, "a") as f:  # what MetricWriter.write does next
            f.write(json.dumps(nxt) + "\n")
        assert parse(path) == kept + [nxt], cut
        assert report.read_metrics(path) == kept + [nxt]


def test_records_past_the_restored_step_are_dropped_and_an_intact_log_is_not_rewritten(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    with open(path, "wb") as f:
        f.write(lines(records(3)))
    before = os.stat(path).st_mtime_ns, os.stat(path).st_ino
    report.truncate_metrics(path, last_step=30)
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == before  # nothing to repair: the file is untouched
    report.truncate_metrics(path, last_step=15)
    assert parse(path) == records(1)
    report.truncate_metrics(str(tmp_path / "absent.jsonl"), 0)  # no log yet: nothing to do
    assert not os.path.exists(tmp_path / "absent.jsonl")


PERIODIC = {
    "eval.periodic.every": 4,
    "eval.periodic.nll_images": 16,
    "eval.periodic.nll_timesteps": 6,
    "eval.periodic.num_samples": 16,
    "eval.periodic.steps": 3,
}


def cut_in_half(log, record):
    """Cut metrics.jsonl in the middle of its record number `record` (0-based), dropping what follows it."""
    data = open(log, "rb").read()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")][:-1]
    end = data.index(b"\n", starts[record]) + 1
    with open(log, "wb") as f:
        f.write(data[: (starts[record] + end) // 2])


@pytest.mark.slow  # three tiny training runs in this process, about a minute of CPU
def test_a_resumed_run_whose_log_was_cut_writes_the_log_of_an_uninterrupted_run(tiny, tmp_path):
    """A run to step 4 (checkpoints 2 and 4, the periodic evaluation at 4), and the two crashes it could have had at
    its end: (a) while writing step 4's training record, before checkpoint 4 (the record cut mid-line, the
    checkpoint never written): the same command resumes from 2; (b) while writing the periodic evaluation's record,
    after checkpoint 4 (that record cut): the same command catches it up. Either way the log equals the
    uninterrupted run's, record for record (timings aside)."""
    from drivers.train import train

    c = tiny(**{"train.num_steps": 4, "train.ckpt_every": 2, "train.log_every": 2, **PERIODIC})
    full = str(tmp_path / "full")
    train(c, full)
    want = parse(os.path.join(full, "metrics.jsonl"))
    assert [(r["step"], "periodic/seconds" in r) for r in want] == [(2, False), (4, False), (4, True)]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING and k != "periodic/seconds"} for r in rows]
    for crash, record in (("before_checkpoint", 1), ("after_checkpoint", 2)):
        wd = str(tmp_path / crash)
        shutil.copytree(full, wd)
        if crash == "before_checkpoint":
            shutil.rmtree(os.path.join(wd, "checkpoints", "4"))
        log = os.path.join(wd, "metrics.jsonl")
        cut_in_half(log, record)
        train(c, wd)
        assert strip(parse(log)) == strip(want), crash
