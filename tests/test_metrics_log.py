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


@pytest.mark.slow  # two tiny training runs in this process, about 40 s
def test_a_resumed_run_whose_log_was_cut_writes_the_log_of_an_uninterrupted_run(tiny, tmp_path):
    """A run to step 4 (checkpoints 2 and 4), then the crash it would have had while writing step 4's record: that
    record cut mid-line and checkpoint 4 never written. The same command resumes from 2; its log equals the
    uninterrupted run's record for record (timings aside)."""
    from training.train import train

    c = tiny(**{"train.num_steps": 4, "train.ckpt_every": 2, "train.log_every": 2})
    full = str(tmp_path / "full")
    train(c, full)
    crashed = str(tmp_path / "crashed")
    shutil.copytree(full, crashed)
    shutil.rmtree(os.path.join(crashed, "checkpoints", "4"))
    log = os.path.join(crashed, "metrics.jsonl")
    data = open(log, "rb").read()
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    with open(log, "wb") as f:
        f.write(data[: last + (len(data) - last) // 2])  # half of step 4's record
    train(c, crashed)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
    got, want = parse(log), parse(os.path.join(full, "metrics.jsonl"))
    assert [r["step"] for r in got] == [2, 4]
    assert strip(got) == strip(want)
