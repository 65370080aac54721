"""The benchmarks' own arithmetic (no training): the convergence horizon, the paired intervals, their power and
the seeds a table needs, and the learned policy's summary."""

import json
import os
import sys

import numpy as np
import pytest
from scipy import stats

from benchmarks.bound_reduction import interval
from benchmarks.samplers import horizon


def test_horizon_is_the_first_evaluation_no_later_one_undercuts_by_more_than_tol():
    steps = np.arange(1, 13) * 500
    bpd = np.array([5.0, 4.8, 4.7, 4.65, 4.63, 4.625, 4.62, 4.618, 4.62, 4.617, 4.619, 4.616])
    # 4.63 at 2500 is undercut by 4.616 (more than 0.01 below); 4.625 at 3000 is not
    assert horizon(steps, bpd, 0.01) == 3000
    assert horizon(steps, bpd, 0.02) == 2500
    assert horizon(steps[:8], bpd[:8], 0.01) is None  # 4,000 steps do not reach 1.5 x 3,000: too short to tell
    rising = np.array([5.0, 4.8, 4.7, 4.75, 4.8, 4.85, 4.9, 4.95, 5.0, 5.05, 5.1, 5.15])  # overfitting after 1500
    assert horizon(steps, rising, 0.0) == 1500


def test_steps_to_a_target_on_the_bound_and_on_fid_from_hand_made_curves():
    from benchmarks.samplers import steps_to

    def run(bpd, fid):
        return dict(
            steps=np.array([500, 1000, 1500]),
            train_s=np.array([10.0, 20.0, 30.0]),
            bpd=np.array(bpd),
            fid=np.array(fid),
        )

    ds = [run([5.0, 4.8, 4.7], [0.30, 0.20, 0.25]), run([5.1, 4.9, 4.8], [0.40, 0.30, 0.19])]
    assert steps_to(ds, 4.8) == ("1250 (2/2)", "25")  # first at or below 4.8: step 1000 (20 s), step 1500 (30 s)
    assert steps_to(ds, 0.2, "fid") == ("1250 (2/2)", "25")  # the second run's FID rises again, then falls to 0.19
    assert steps_to(ds, 0.195, "fid") == ("1500 (1/2)", "30")
    assert steps_to(ds, 4.0) == ("- (0/2)", "-")


def test_interval_is_students_t_over_replicates():
    x = np.array([0.3, -0.1, 0.2, 0.4, 0.0])
    mean, half = interval(x)
    assert mean == pytest.approx(0.16)
    assert half == pytest.approx(stats.t.ppf(0.975, 4) * np.std(x, ddof=1) / np.sqrt(5))


# Paired samples of d = run - uniform (bits/dim) and what scipy gave by hand for them: sd_d (ddof 1) 0.0364692,
# t_{.975,4} = 2.776445, t_{.8,4} = 0.940965, MDD = (2.776445 + 0.940965) 0.0364692 / sqrt(5) = 0.0606291; the MDD at
# n = 6 is 0.0519626 and at n = 7 0.0462126, so 7 seeds detect 0.05 bits/dim.
D = np.array([0.03, -0.02, 0.05, 0.01, -0.04])


def test_minimum_detectable_difference_and_seed_count_match_values_computed_by_hand():
    from benchmarks.samplers import mdd, seeds_needed

    sd = D.std(ddof=1)
    assert sd == pytest.approx(0.0364692, rel=1e-5)
    assert mdd(sd, 5) == pytest.approx(0.0606291, rel=1e-5)
    assert seeds_needed(sd, 0.05) == 7
    assert seeds_needed(sd, 0.0519) == 7 and seeds_needed(sd, 0.052) == 6  # the boundary between n = 6 and 7
    assert seeds_needed(sd, 0.5) == 2 and seeds_needed(0.0, 0.05) == 2
    assert seeds_needed(sd, 1e-6) is None  # beyond MAX_SEEDS
    assert np.isnan(mdd(sd, 1))


def test_exact_mdd_has_the_power_and_the_approximation_falls_short_at_small_n():
    from benchmarks.samplers import mdd, mdd_exact, t_test_power

    # the noncentral-t power of the approximation's MDD: 0.73 at n = 2, 0.79 at n = 5, 0.80 from n = 20 on
    assert t_test_power(mdd(1.0, 2), 1.0, 2) == pytest.approx(0.7308, abs=1e-3)
    assert t_test_power(mdd(1.0, 5), 1.0, 5) == pytest.approx(0.7913, abs=1e-3)
    for n in (2, 3, 5, 10, 20, 50):
        exact = mdd_exact(1.0, n)
        assert t_test_power(exact, 1.0, n) == pytest.approx(0.8, abs=1e-6)
        if n <= 10:  # the approximation is short of power: the exact MDD is larger
            assert exact > mdd(1.0, n)
        else:  # and agrees from about 20 pairs on
            assert exact == pytest.approx(mdd(1.0, n), rel=1e-3)
    assert mdd_exact(2.0, 5) == pytest.approx(2 * mdd_exact(1.0, 5), rel=1e-6)  # proportional to sd


def test_verdict_wording_separated_and_not():
    from benchmarks.samplers import verdict

    assert verdict("adaptive", D, "bits/dim") == "bits/dim: not separated: the table could have detected |d| >= 0.061"
    lower = np.array([-0.10, -0.12, -0.08, -0.11])
    assert verdict("adaptive", lower, "FID") == "FID: adaptive is lower than uniform (95% interval excludes 0)"
    assert verdict("speed", -lower, "KID") == "KID: speed is higher than uniform (95% interval excludes 0)"


def test_worse_seeds_and_the_pairs_against_the_adaptive_noise_schedule():
    from benchmarks.samplers import paired, worse_and_rival

    bpd = dict(uniform=[5.0, 5.1, 4.9], adaptive_noise=[4.9, 5.0, 4.8], adaptive=[5.02, 5.0, 5.3])
    results = {k: [dict(final_bpd=v) for v in vs] for k, vs in bpd.items()}
    runs = [(k, None, None) for k in bpd]
    lines = worse_and_rival(results, runs)
    assert "(worse): adaptive_noise 0/3, adaptive 2/3." in lines[1]
    d = np.array([0.12, 0.0, 0.5])  # adaptive - adaptive_noise
    assert lines[-1] == f"- adaptive: Δ bits/dim {paired(d)}; higher in 2/3 seeds."  # no FID: no FID clause
    assert len(worse_and_rival({k: results[k] for k in ("uniform", "adaptive")}, runs[::2])) == 2  # no rival


def test_each_rival_pairs_every_other_run_on_bits_per_dim_and_fid(monkeypatch):
    """--rivals: the regret of every run against a second rival (a grid's best fixed distribution), FID too."""
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "RIVALS", ("adaptive_noise", "beta/a=0.34/b=3.3"))
    runs = {
        "uniform": ([5.0, 5.1, 4.9], [0.20, 0.22, 0.18]),
        "adaptive_noise": ([4.9, 5.0, 4.8], [0.15, 0.2, 0.1]),
        "beta/a=0.34/b=3.3": ([4.5, 4.4, 4.6], [0.3, 0.25, 0.2]),
    }
    results = {k: [dict(final_bpd=b, fid_final=f) for b, f in zip(*v)] for k, v in runs.items()}
    lines = samplers.worse_and_rival(results, [(k, None, None) for k in runs])
    at = lines.index("Against beta/a=0.34/b=3.3 (d = run - beta/a=0.34/b=3.3, same seeds):")
    bpd, fid = np.array([0.4, 0.6, 0.2]), np.array([-0.15, -0.05, -0.1])  # adaptive_noise - beta, by hand
    want = f"- adaptive_noise: Δ bits/dim {samplers.paired(bpd)}; higher in 3/3 seeds; Δ FID {samplers.paired(fid)}."
    assert lines[at + 2] == want and len(lines) == at + 3  # uniform (the baseline) is not listed against it


def test_another_baseline_pairs_every_column_with_it(monkeypatch):
    """--baseline=lognormal (EDM's own density): differences, the worse-seed count and the verdicts are against it."""
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "BASE", "lognormal")
    bpd = dict(lognormal=[5.0, 5.1, 4.9], uniform=[5.3, 5.4, 5.2], adaptive_noise=[4.9, 5.2, 4.8])
    results = {k: [dict(final_bpd=v) for v in vs] for k, vs in bpd.items()}
    np.testing.assert_allclose(samplers.differences(results, "uniform", "final_bpd"), [0.3, 0.3, 0.3])
    lines = samplers.worse_and_rival(results, [(k, None, None) for k in bpd])
    assert (
        lines[1]
        == "Seeds whose final test bits/dim is higher than lognormal's (worse): uniform 3/3, adaptive_noise 1/3."
    )
    assert samplers.verdict("uniform", np.array([0.3, 0.31, 0.29]), "FID").endswith(
        "higher than lognormal (95% interval excludes 0)"
    )
    with pytest.raises(SystemExit, match="must include lognormal"):
        samplers.parse_runs("uniform,adaptive")


def test_paired_cell_has_interval_and_mdd():
    from benchmarks.samplers import paired

    half = stats.t.ppf(0.975, 4) * D.std(ddof=1) / np.sqrt(5)
    assert paired(D) == f"+0.006 [{0.006 - half:+.3f}, {0.006 + half:+.3f}], MDD 0.061"


def test_size_from_reads_a_pilot(tmp_path, capsys):

    from benchmarks.samplers import sizing

    uniform = [4.00, 4.10, 3.90, 4.05, 3.95]
    for name, bpd in (("uniform", uniform), ("adaptive__importance_weights-True", np.add(uniform, D))):
        for seed, b in enumerate(bpd):
            os.makedirs(tmp_path / f"{name}_seed{seed}" / "eval")
            ev = dict(nll_bpd=dict(value=float(b)), fid=dict(fid=10.0 + seed, kid=0.01))
            (tmp_path / f"{name}_seed{seed}" / "eval" / "step_100.json").write_text(json.dumps(ev))
    os.makedirs(tmp_path / "adaptive__importance_weights-True_seed9")  # unfinished: no eval, left out
    text = sizing(str(tmp_path))
    row = next(line for line in text.splitlines() if "bits/dim |" in line and line.startswith("| adaptive"))
    # name read back from the workdir; n, mean d, sd_d, MDD, target 0.05 and the 7 seeds computed by hand above
    assert row.startswith("| adaptive/importance_weights=True | 5 | bits/dim | +0.006 | 0.036 | 0.061 | 0.061 |")
    assert row.endswith("| 0.050 | 7 |")
    fid = next(line for line in text.splitlines() if "| FID |" in line)
    assert "| 0.000 |" in fid and fid.endswith("| 1.200 | 2 |")  # d = 0 every seed; 10% of uniform's mean FID 12


def test_estimate_note_compares_the_standard_error_with_a_quarter_of_the_mdd():
    """--bound_strata: the line under the table gives the estimate's largest standard error against a quarter of the
    smallest bits/dim MDD (0.0606291 / 4 = 0.0152 for the differences D, by hand above); none with the full bound."""
    from benchmarks.samplers import estimate_note

    uniform = [4.00, 4.10, 3.90, 4.05, 3.95]
    proto = dict(strata=49, per_stratum=2, decoder_draws=16, bound="unbiased stratified estimate")

    def results(se):
        def run(b, e):
            nll = dict(value=b) if e is None else dict(value=b, estimate_stderr=e, protocol=proto)
            return dict(final_bpd=b, eval=dict(nll_bpd=nll))

        return {
            "uniform": [run(b, se[0]) for b in uniform],
            "adaptive": [run(b, se[1]) for b in np.add(uniform, D)],
        }

    assert estimate_note(results([None, None])) is None
    note = estimate_note(results([0.004, 0.015]))
    assert note.startswith(
        "Final bits/dim of 10 of 10 runs are the stratified estimate of the bound (49 strata x 2, decoder x 16"
    )
    assert "at most 0.0150 bits/dim (mean 0.0095), within a quarter of the table's smallest bits/dim MDD, 0.0152." in (
        note
    )
    note = estimate_note(results([None, 0.016]))
    assert "Final bits/dim of 5 of 10 runs" in note and "the other runs' are the full bound" in note
    assert "ABOVE a quarter of the table's smallest bits/dim MDD, 0.0152: evaluate with more strata" in note


def test_bad_bound_strata_stop_the_benchmark_before_anything_runs(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    for flags, needle in (
        (["--bound_strata=1000"], "config.eval.bound_strata=1000 is not allowed: must be an integer in 0..999"),
        (["--config=configs/flow.py", "--bound_strata=10"], "must be 0 (the full computation)"),
    ):
        cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "samplers.py"), f"--out={tmp_path}/out", *flags]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        err = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(err) == 1 and needle in err[0], r.stderr[-2000:]
        assert not (tmp_path / "out").exists()


def _metrics(path, steps, densities, spreads):

    with open(path, "w") as f:
        f.write(json.dumps({"step": 0, "loss": 1.0}) + "\n")  # a record without the policy
        for s, d, sp in zip(steps, densities, spreads):
            rec = {"step": s, "sampler/policy_density": list(d), "sampler/policy_spread": sp, "loss": 0.5}
            f.write(json.dumps(rec) + "\n")


def test_density_summary_mean_u_and_tv_of_a_hand_made_density():
    from benchmarks.samplers import density_summary

    # bin centres 1/8, 3/8, 5/8, 7/8: mean u = 0.05 + 0.1125 + 0.125 + 0.0875 = 0.375; TV = (0.15 + 0.05 + 0.05 +
    # 0.15) / 2 = 0.2
    mean_u, tv = density_summary([0.4, 0.3, 0.2, 0.1])
    assert mean_u == pytest.approx(0.375) and tv == pytest.approx(0.2)
    mean_u, tv = density_summary([[2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 5.0]])  # unnormalised masses
    np.testing.assert_allclose(mean_u, [0.5, 0.875])
    np.testing.assert_allclose(tv, [0.0, 0.75])


def test_policy_figure_and_summary_from_hand_made_metrics(tmp_path):
    from benchmarks.samplers import policy_section, policy_track

    flat, tilted = [0.25] * 4, [0.4, 0.3, 0.2, 0.1]
    for seed, (last, spread) in enumerate([(tilted, 0.02), (flat, 0.04)]):
        wd = tmp_path / f"adaptive_seed{seed}"
        wd.mkdir()
        _metrics(wd / "metrics.jsonl", [20, 40, 60], [flat, flat, last], [0.0, 0.01, spread])
    tracks = {"adaptive": [policy_track(str(tmp_path / f"adaptive_seed{s}")) for s in (0, 1)]}
    np.testing.assert_array_equal(tracks["adaptive"][0]["steps"], [20, 40, 60])
    np.testing.assert_allclose(tracks["adaptive"][0]["tv"], [0.0, 0.0, 0.2], atol=1e-12)
    text = policy_section(tracks, str(tmp_path / "policy.png"))
    assert (tmp_path / "policy.png").stat().st_size > 0
    assert "![the policy over training](policy.png)" in text.splitlines()
    line = next(x for x in text.splitlines() if x.startswith("- adaptive"))
    # final mean u 0.375 and 0.5 (mean 0.4375), TV 0.2 and 0 (mean 0.1), spread 0.02 and 0.04 (mean 0.03)
    assert line.startswith("- adaptive (2 seed(s), step 60): final mean u 0.438 ± 0.088 [0.375, 0.500];")
    assert "TV from uniform 0.100 ± 0.141 [0.200, 0.000]" in line and "spread 0.030 ± 0.014 [0.020, 0.040]" in line
    # the path at steps 15, 30, 45, 60: no record yet at 15 (nan), flat at 30 and 45, then the final values' means
    path = text.splitlines()[text.splitlines().index(line) + 1]
    assert "step 15: nan / nan, 30: 0.50 / 0.000, 45: 0.50 / 0.000, 60: 0.44 / 0.100;" in path
    assert path.endswith("largest TV per seed: 0.20 (step 60), 0.00 (step 20).")
    os.makedirs(tmp_path / "uniform_seed0")
    _metrics(tmp_path / "uniform_seed0" / "metrics.jsonl", [], [], [])
    assert policy_track(str(tmp_path / "uniform_seed0")) is None


def test_walk_and_gain_correlates_the_direction_with_the_gain():
    from benchmarks import samplers

    # average mean u 0.25, 0.5, 0.75 (centred -1/4, 0, 1/4) against gains -0.2, 0, 0.1 (mean -1/30, centred -1/6,
    # 1/30, 2/15): sum of products 1/4 (1/6 + 2/15) = 0.075, r = 0.075 / (sqrt(1/8) sqrt(1/36 + 1/900 + 4/225)) = 0.982
    ts = [{"mean_u": np.array([0.5, 0.0])}, {"mean_u": np.array([0.5])}, {"mean_u": np.array([1.0, 0.5])}]
    line = samplers.walk_and_gain(ts, [-0.2, 0.0, 0.1])
    assert line.startswith("average mean u over the run / Δ bits/dim vs uniform per seed: 0.25 / -0.200, 0.50 / +0.000")
    assert line.endswith("Pearson r = 0.98 (3 seeds).")
    # a seed without a value is left out; with fewer than 3 pairs, no r
    assert samplers.walk_and_gain(ts, [-0.2, None, 0.1]).endswith("per seed: 0.25 / -0.200, 0.75 / +0.100.")


def test_runs_of_the_new_samplers_parse():
    from benchmarks.samplers import parse_runs, parse_setting, setting_flag

    runs = parse_runs(
        "uniform,infonoise,adaptive_noise,logitnormal/shift=3.0,adaptive/importance_weights=True,"
        "adaptive/entropy_coef=0,adaptive/policy_lr=0.1"
    )
    assert [r[1] for r in runs] == ["uniform", "infonoise", "adaptive_noise", "logitnormal"] + ["adaptive"] * 3
    assert parse_setting("adaptive", "importance_weights=True") == ("importance_weights", True)
    assert parse_setting("adaptive", "importance_weights=false") == ("importance_weights", False)
    assert parse_setting("adaptive", "entropy_coef=0") == ("entropy_coef", 0.0)
    assert parse_setting("logitnormal", "shift=3.0") == ("shift", 3.0)
    # the reference's own settings as one run: tuples with colons, passed to main.py as tuples
    assert parse_setting("adaptive", "policy_channels=32:64:128") == ("policy_channels", (32, 64, 128))
    assert setting_flag("adaptive", "policy_hidden=256") == "--config.sampler.adaptive.policy_hidden=(256,)"
    assert setting_flag("adaptive", "policy_hidden=()") == "--config.sampler.adaptive.policy_hidden=()"
    assert setting_flag("adaptive", "sweep_stride=1") == "--config.sampler.adaptive.sweep_stride=1"
    for bad in ("importance_weights=maybe", "entropy_cof=0", "num_selected=2.5", "policy_channels=8:x"):
        with pytest.raises(ValueError):
            parse_setting("adaptive", bad)
    with pytest.raises(SystemExit):
        parse_runs("uniform,logitnormal/shift=-1")


def test_a_killed_invocations_wall_clock_is_kept_and_a_resumed_one_adds_to_it(tmp_path):
    """samplers.timed records while the command runs: SIGKILL the benchmark process itself (nothing of it runs after)
    during a long command, and the time until the last record is in bench_seconds.json; a second invocation adds
    its own and keeps the other keys. The commands are real child processes."""
    import signal
    import subprocess
    import sys
    import time

    path, log = str(tmp_path / "run" / "bench_seconds.json"), str(tmp_path / "train.log")
    code = (
        "import sys; sys.path.insert(0, '.'); from benchmarks.samplers import timed; "
        f"timed([sys.executable, '-c', 'import time; print(1, flush=True); time.sleep(60)'], {log!r}, {path!r}, "
        "'train', every=0.2)"
    )
    root = os.path.dirname(os.path.dirname(__file__))
    bench = subprocess.Popen([sys.executable, "-c", code], cwd=root, start_new_session=True)
    t0 = time.monotonic()
    while not (os.path.exists(path) and json.load(open(path))["train"] >= 1.0):
        assert bench.poll() is None and time.monotonic() - t0 < 60, "no record while the command ran"
        time.sleep(0.1)
    os.killpg(bench.pid, signal.SIGKILL)  # the benchmark and its command at once, as a killed session does
    bench.wait()
    killed = json.load(open(path))["train"]
    assert 1.0 <= killed < 60
    with open(path, "w") as f:  # another key, as the run's eval would have added
        json.dump({"train": killed, "eval": 2.5}, f)

    from benchmarks.samplers import timed

    rc, seconds = timed([sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"], log, path, "train")
    assert rc == 3 and 0.5 <= seconds < 30
    record = json.load(open(path))
    assert record["eval"] == 2.5 and record["train"] == pytest.approx(killed + seconds)
    assert open(log).read().startswith("1\n")  # the killed invocation's output kept, the resumed one's after it


def test_records_carry_finished_runs_to_a_new_machine_and_never_overwrite_a_workdir(tmp_path, capsys):
    """--records: keep_record copies a finished run's record (not its checkpoints) out of OUT; restore_records, in a
    fresh OUT (a clean clone on another machine), puts it back so that run_one skips the run and sizing reads it; a
    workdir already in OUT (a partial run) is not touched, and an unfinished record is not restored."""
    import argparse

    from benchmarks.samplers import finished_runs, keep_record, restore_records, run_one

    out, records, fresh = tmp_path / "out", tmp_path / "records", tmp_path / "fresh"
    for name, bpd in (("uniform", 4.0), ("adaptive__importance_weights-True", 3.9)):
        wd = out / f"{name}_seed0"
        os.makedirs(wd / "eval")
        os.makedirs(wd / "checkpoints" / "2000")
        (wd / "checkpoints" / "2000" / "state").write_bytes(b"\0" * 1000)
        (wd / "run_config.json").write_text(json.dumps({"seed": 0}))
        (wd / "metrics.jsonl").write_text(json.dumps({"step": 2000, "loss": 0.5}) + "\n")
        (wd / "bench_seconds.json").write_text(json.dumps({"train": 200.0, "eval": 100.0}))
        ev = dict(nll_bpd=dict(value=bpd), fid=dict(fid=1.0, kid=0.01))
        (wd / "eval" / "step_2000.json").write_text(json.dumps(ev))
        keep_record(str(wd), str(records))
    kept = records / "uniform_seed0"
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "bench_seconds.json",
        "eval/step_2000.json",
        "metrics.jsonl",
        "run_config.json",
    ]
    os.makedirs(records / "uniform_seed1")  # a record without its eval JSON: not a finished run
    (records / "uniform_seed1" / "metrics.jsonl").write_text("")

    os.makedirs(fresh / "adaptive__importance_weights-True_seed0" / "checkpoints")  # a partial run already there
    assert restore_records(str(records), str(fresh)) == ["uniform_seed0"]
    assert "adaptive__importance_weights-True_seed0: not restored" in capsys.readouterr().out
    assert not (fresh / "adaptive__importance_weights-True_seed0" / "eval").exists()
    assert not (fresh / "uniform_seed1").exists()
    found = finished_runs(str(fresh))
    assert list(found) == ["uniform"] and json.loads((fresh / "uniform_seed0" / "bench_seconds.json").read_text()) == {
        "train": 200.0,
        "eval": 100.0,
    }
    args = argparse.Namespace(records=str(tmp_path / "again"), config="no/such/config.py", every=500, set=[])
    assert run_one(str(fresh), "uniform", "uniform", ("none", []), 0, args) == str(fresh / "uniform_seed0")
    assert "uniform seed 0: already done" in capsys.readouterr().out  # main.py not run: the config does not exist
    assert (tmp_path / "again" / "uniform_seed0" / "eval" / "step_2000.json").exists()  # a done run's record kept too


def test_after_a_failed_run_no_other_run_starts(tmp_path):
    """--jobs=2: main.py refuses a bad field (exit 2) in each of the first two runs; the four queued behind them never
    start (a pool worker would otherwise take the next job at once), and the benchmark exits naming the failure."""
    import types

    from benchmarks.samplers import run_all

    if len(os.sched_getaffinity(0)) < 2:  # then --jobs=2 is refused before anything runs, as it should be
        pytest.skip("--jobs=2 needs 2 CPU cores; this process may use 1 (e.g. under taskset -c 0)")
    args = types.SimpleNamespace(
        config="configs/default.py", every=500, set=["train.batch_size=-1"], records=None, jobs=2
    )
    runs = [("uniform", "uniform", ("none", [])), ("adaptive", "adaptive", ("none", []))]
    with pytest.raises(SystemExit, match=r"error: (uniform|adaptive) seed 0 --mode=train failed \(exit 2\)"):
        run_all(str(tmp_path), runs, [0, 1, 2], args)
    started = sorted(p.name for p in tmp_path.iterdir() if (p / "train.log").exists())
    assert started == ["adaptive_seed0", "uniform_seed0"], started


def test_compute_note_gives_the_evaluation_share_of_hand_made_runs(tmp_path):
    """The final evaluation (bench_seconds' eval) and the periodic ones (periodic/seconds in metrics.jsonl) as shares
    of the runs' summed wall-clock: 200 s and 100 s of 1,000 s."""

    from benchmarks.samplers import compute_note, load

    results = {}
    for name, train, final, periodic in (("uniform", 300.0, 100.0, (20.0, 30.0)), ("adaptive", 500.0, 100.0, (50.0,))):
        wd = tmp_path / name
        os.makedirs(wd / "eval")
        rows = [
            {"step": 100 * (i + 1), "periodic/bpd_T20": 4.0, "periodic/seconds": p, "train_seconds": 1.0 + i}
            for i, p in enumerate(periodic)
        ]
        (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (wd / "bench_seconds.json").write_text(json.dumps({"train": train, "eval": final}))
        (wd / "eval" / "step_200.json").write_text(json.dumps(dict(nll_bpd=dict(value=4.0), fid=dict(fid=1.0))))
        results[name] = [load(str(wd))]
    note = compute_note(results)
    assert "sums to 0.28 h" in note
    assert note.endswith("evaluation 30.0% of it: the final evaluation 20.0%, the periodic ones 10.0%.")
    assert compute_note({"uniform": [dict(results["uniform"][0], bench_s=0.0)]}) == ""


def test_compilation_cache_settings_reach_a_child_jax_process(tmp_path):
    """cache_env: a child JAX process with the default settings writes its compiled program into OUT/jax_cache, even
    one that compiles in well under JAX's 1 s default threshold; with `off` it writes none, though its environment
    names a cache directory (as conftest.py's does)."""
    import subprocess
    import sys

    from benchmarks.samplers import cache_env

    code = "import jax, jax.numpy as jnp; print(float(jax.jit(lambda x: (x * 2 + 1).sum())(jnp.ones(3))))"
    out, other = tmp_path / "out", tmp_path / "inherited"
    for cache, where in (("", out / "jax_cache"), ("off", other)):
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(other), **cache_env(cache, str(out))}
        assert env["JAX_COMPILATION_CACHE_DIR"] == str(where)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "9.0", r.stderr[-2000:]
        written = list(where.rglob("*")) if where.exists() else []
        assert bool(written) == (cache != "off"), (cache, written)


def test_runs_measured_with_different_feature_networks_or_data_are_not_paired(monkeypatch, capsys):
    """A pair whose FID feature networks differ is left out of the FID and KID comparison (its bits/dim still pair),
    one whose data differ out of every comparison; each with one line naming the seeds; --allow_mixed keeps them."""
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "MIXED", {})
    fp = lambda data="d1", net="n1", probe=0.05: dict(data=data, features=net, probe=probe)
    run = lambda bpd, fid, seed, **kw: dict(final_bpd=bpd, fid_final=fid, kid_final=fid / 10, seed=seed, fp=fp(**kw))
    results = dict(
        uniform=[run(5.0, 1.0, 0), run(5.0, 1.0, 1), run(5.0, 1.0, 2)],
        adaptive=[run(4.9, 0.8, 0), run(4.8, 0.7, 1, net="n2"), run(4.7, 0.6, 2, data="d2")],
    )
    np.testing.assert_allclose(samplers.differences(results, "adaptive", "final_bpd"), [-0.1, -0.2])
    np.testing.assert_allclose(samplers.differences(results, "adaptive", "fid_final"), [-0.2])
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "adaptive seed 2 and uniform seed 2: bits/dim not paired: data d2 against d1",
        "adaptive seed 1 and uniform seed 1: FID and KID not paired: features n2 against n1",
        "adaptive seed 2 and uniform seed 2: FID and KID not paired: data d2 against d1",
    ]
    # a mean over seeds measured in two spaces is marked; uniform's seeds were all measured alike
    assert samplers.mixed_mark(results["adaptive"], "fid_final") == " (mixed)"
    assert samplers.mixed_mark(results["adaptive"], "final_bpd") == " (mixed)"  # seed 2 read other data
    assert samplers.mixed_mark(results["uniform"], "fid_final") == ""
    assert samplers.mixed_mark(results["adaptive"][:1], "fid_final") == ""
    note = "\n".join(samplers.fingerprint_note(results))
    assert "- data: d1; d2." in note and "- FID feature network: n1; n2." in note
    assert "- adaptive seed 1 and uniform seed 1: FID and KID not paired: features n2 against n1." in note
    # a latent model's decoder: two named decoders that differ are two metrics; a record without one pairs
    dec = lambda d: dict(fid_final=1.0, fp=dict(fp(), decoder=d))
    assert samplers.unlike(dec("a1"), dec("a2"), "fid_final") == "decoder a1 against a2"
    assert samplers.unlike(dec("a1"), dec(None), "fid_final") is None
    assert samplers.unlike(dec("a1"), dec("a2"), "final_bpd") is None
    monkeypatch.setattr(samplers, "ALLOW_MIXED", True)
    np.testing.assert_allclose(samplers.differences(results, "adaptive", "fid_final"), [-0.2, -0.3, -0.4])
    assert "paired anyway (--allow_mixed)" in capsys.readouterr().err


def test_steps_to_the_baseline_s_final_value_count_only_curves_measured_alike(monkeypatch, capsys, tmp_path):
    """Steps to uniform's final periodic FID count only the seeds whose periodic FID was measured with uniform's
    network (and bound curves only those on uniform's data), each seed left out named; "mixed" when uniform's own
    seeds differ. A log written across the metric's renaming (periodic/fid_N250, then periodic/fid_N250/<tag>)
    reads as one curve."""
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "MIXED", {})
    steps = np.array([100, 200, 300])

    def run(seed, fid, periodic="p1", data="d1"):
        fp = dict(data=data, periodic=periodic)
        return dict(seed=seed, steps=steps, fid=np.array(fid), bpd=np.array(fid), train_s=steps / 10.0, fp=fp)

    base = [run(0, [3.0, 2.0, 1.0]), run(1, [3.0, 2.0, 1.0])]  # target 1.0, reached at step 300
    arm = [run(0, [2.0, 1.0, 0.5]), run(1, [0.9, 0.8, 0.7], periodic="p2"), run(2, [2.0, 0.9, 0.5], periodic=None)]
    kept = samplers.curve_alike(arm, base, "fid", "arm", "uniform")
    assert [d["seed"] for d in kept] == [0, 2]  # seed 1's network differs; seed 2 has no hash: not refused
    assert samplers.steps_to(kept, 1.0, "fid") == ("200 (2/2)", "20")
    assert capsys.readouterr().err.splitlines() == [
        "arm seed 1: its periodic FID curve not compared with uniform's: periodic p2 against p1"
    ]
    assert len(samplers.curve_alike(arm, base, "bpd", "arm", "uniform")) == 3  # the bound does not use the network
    other_data = [run(0, [2.0, 1.0, 0.5], data="d2")]
    assert samplers.curve_alike(other_data, base, "bpd", "arm", "uniform") == []
    decoded = [dict(d, fp=dict(d["fp"], decoder=dec)) for d, dec in zip(base, ("a1", None))]
    other_decoder = [dict(arm[0], fp=dict(arm[0]["fp"], decoder="a2"))]
    assert samplers.curve_alike(other_decoder, decoded, "fid") == []  # a latent model's decoder: another metric
    assert len(samplers.curve_alike(arm[:1], decoded, "fid")) == 1  # a record naming none is not refused
    mixed_base = [run(0, [3.0, 2.0, 1.0]), run(1, [3.0, 2.0, 1.0], periodic="p2")]
    capsys.readouterr()
    assert samplers.steps_to(samplers.curve_alike(arm, mixed_base, "fid", "arm", "uniform"), 1.0, "fid") == (
        "mixed",
        "mixed",
    )
    assert capsys.readouterr().err == "uniform's periodic FID curves not averaged: periodic p1; p2\n"
    # records before fingerprints: the test split's FID tells two networks apart (as for the final FID)
    old = lambda seed, probe: dict(run(seed, [2.0, 1.0, 0.5]), fp=dict(probe=probe))
    kept = samplers.curve_alike([old(0, 0.05467), old(1, 0.05748)], [old(0, 0.05467)], "fid", "arm", "uniform")
    assert [d["seed"] for d in kept] == [0]
    assert samplers.steps_to(kept, 1.0, "fid", of=2) == ("200 (1/1, 1 not alike)", "20")
    assert samplers.curve_alike([dict(seed=0, fp=None)], [dict(seed=0, fp=None)], "fid") == [dict(seed=0, fp=None)]
    assert samplers.steps_to([], 1.0, "fid", of=1) == ("- (0/0, 1 not alike)", "-")

    wd = tmp_path / "run"
    wd.mkdir()
    rows = [
        {"step": 100, "periodic/bpd_T8": 5.0, "periodic/fid_N16": 3.0, "train_seconds": 1.0},
        {"step": 200, "periodic/bpd_T8": 4.0, "periodic/fid_N16/0a1b2c3d": 2.0, "train_seconds": 2.0},
    ]
    (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = samplers.load_curve(str(wd))
    assert curve["fid_key"] == "periodic/fid_N16" and curve["fid_tags"] == ["0a1b2c3d"]
    np.testing.assert_array_equal(curve["fid"], [3.0, 2.0])
    # a log whose FID changed its measure (tag) is a curve of two metrics; another N is not this curve
    rows = [
        {"step": 100, "periodic/bpd_T8": 5.0, "periodic/fid_N16/aaaaaaaa": 3.0, "train_seconds": 1.0},
        {"step": 200, "periodic/bpd_T8": 4.0, "periodic/fid_N32/aaaaaaaa": 2.0, "train_seconds": 2.0},
        {"step": 300, "periodic/bpd_T8": 3.0, "periodic/fid_N16/bbbbbbbb": 9.0, "train_seconds": 3.0},
    ]
    (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    two = dict(samplers.load_curve(str(wd)), seed=0)
    assert two["fid_tags"] == ["aaaaaaaa", "bbbbbbbb"]
    np.testing.assert_array_equal(two["fid"], [3.0, np.nan, 9.0])
    one = dict(two, fid_tags=["aaaaaaaa"])
    assert samplers.curve_alike([two], [one], "fid", "arm", "uniform") == []
    assert "tags aaaaaaaa then bbbbbbbb against aaaaaaaa" in capsys.readouterr().err


def test_records_without_fingerprints_pair_unless_their_test_split_fids_tell_two_networks_apart(monkeypatch):
    """Records that predate fingerprints: a pair is kept (the note says they were not fingerprinted) unless the test
    split's own FID, a function of the feature network, differs beyond FID_PROBE_RTOL (0.05467 against 0.05748:
    two MNIST classifiers of benchmarks/records/latent_edm37); a hash on one side alone decides nothing."""
    from benchmarks import samplers

    monkeypatch.setattr(samplers, "MIXED", {})
    old = lambda probe: dict(data=None, features=None, probe=probe)
    a, b = dict(fp=old(0.054665714834882806)), dict(fp=old(0.05747765424183626))
    assert samplers.unlike(a, dict(fp=old(0.054665714834882806 * (1 + 1e-6))), "fid_final") is None
    assert samplers.unlike(a, b, "final_bpd") is None  # the bound does not use the feature network
    assert samplers.unlike(a, b, "kid_final") == (
        "feature network: the test split's FID is 0.05467 against 0.05748 (not fingerprinted)"
    )
    new = dict(fp=dict(data="d1", features="n1", probe=0.05747765424183626))
    assert samplers.unlike(a, new, "fid_final") is not None and samplers.unlike(a, new, "final_bpd") is None
    assert samplers.unlike(dict(final_bpd=1.0), dict(final_bpd=2.0), "final_bpd") is None  # hand-made results
    note = samplers.fingerprint_note({"uniform": [a], "adaptive": [new]})
    assert "- data: d1; 1 of 2 runs with no hash in their record (not fingerprinted)." in note


def test_what_a_record_was_measured_with_is_read_from_its_files(tmp_path):
    """measured_with: the data hashes from fingerprints.json (else the eval JSON's), the feature network and
    reference from the eval JSON, the test split's FID as the probe; a split that could not be hashed, or a record
    without fingerprints, gives None (not fingerprinted) rather than a value that would refuse every pair."""

    from benchmarks.samplers import measured_with

    ev = dict(
        fid=dict(fid=1.0, protocol=dict(fingerprint=dict(network="n1", reference="r1")), test_split=dict(fid=0.3)),
        fingerprints=dict(data=dict(train="e1", test="e2")),
    )
    want = dict(data="test e2/train e1", features="n1 (reference r1)", decoder=None, periodic=None, probe=0.3)
    assert measured_with(str(tmp_path), ev) == want
    (tmp_path / "fingerprints.json").write_text(json.dumps(dict(data=dict(train="e1", test="e2"))))
    assert measured_with(str(tmp_path), ev)["data"] == "test e2/train e1"
    # evaluated on other data than it trained on: both, in order
    (tmp_path / "fingerprints.json").write_text(json.dumps(dict(data=dict(train="t1", test="t2"))))
    assert measured_with(str(tmp_path), ev)["data"] == "test t2/train t1 then test e2/train e1"
    (tmp_path / "fingerprints.json").write_text(json.dumps(dict(data=dict(train="unknown", test="unknown"))))
    assert measured_with(str(tmp_path), ev)["data"] is None
    ev["fid"]["protocol"]["fingerprint"]["decoder"] = "a1"  # a latent model's samples pass through a decoder
    assert measured_with(str(tmp_path), ev)["decoder"] == "a1"
    old = dict(fid=dict(fid=1.0, protocol=dict(features="digits classifier"), test_split=dict(fid=0.31973)))
    none = dict(data=None, features=None, decoder=None, periodic=None, probe=0.31973)
    assert measured_with(str(tmp_path / "none"), old) == none


def test_a_run_resumed_with_other_data_keeps_each_attempts_hashes_and_pairs_only_with_the_same_history(
    tmp_path, monkeypatch
):
    """fingerprints.json over two attempts that read different data: each attempt keeps its own data and periodic
    network, the top level names what changed, and the table pairs the run with no run that read only the second
    data; an XLA flag's path is recorded as <path>."""

    from benchmarks import samplers
    from training.report import record_fingerprints

    monkeypatch.setattr(samplers, "MIXED", {})
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/home/someone/dump --xla_cpu_enable_fast_math=false")
    wd = str(tmp_path)
    record_fingerprints(wd, 0, data=dict(train="a", test="b"))
    record_fingerprints(wd, periodic_features=dict(network="n1", reference="r1"))
    record_fingerprints(wd, 100, data=dict(train="c", test="b"))
    record_fingerprints(wd, periodic_features=dict(network="n1", reference="r1"))
    rec = json.load(open(tmp_path / "fingerprints.json"))
    assert [(a["from_step"], a["data"]["train"]) for a in rec["attempts"]] == [(0, "a"), (100, "c")]
    assert [a["periodic_features"]["network"] for a in rec["attempts"]] == ["n1", "n1"]
    assert rec["changed"] == ["data"] and rec["data"] == dict(train="c", test="b")
    assert rec["attempts"][0]["xla_flags"] == "--xla_dump_to=<path> --xla_cpu_enable_fast_math=false"
    ev = dict(fid=dict(fid=1.0), fingerprints=dict(data=dict(train="c", test="b")))
    fp = samplers.measured_with(wd, ev)
    assert fp["data"] == "test b/train a then test b/train c" and fp["periodic"] == "n1 (reference r1)"
    later = dict(final_bpd=4.0, fp=dict(data="test b/train c"))
    assert samplers.unlike(dict(final_bpd=4.1, fp=fp), later, "final_bpd") == (
        "data test b/train a then test b/train c against test b/train c"
    )
    assert samplers.unlike(dict(final_bpd=4.1, fp=fp), dict(final_bpd=4.0, fp=dict(fp)), "final_bpd") is None
    # back on the first data: three parts of history, not two
    record_fingerprints(wd, 200, data=dict(train="a", test="b"))
    again = samplers.measured_with(wd, dict(fid=dict(fid=1.0)))["data"]
    assert again == "test b/train a then test b/train c then test b/train a"
    # a file written before attempts held their own data: its top level is the earlier attempts' data
    old = tmp_path / "old"
    old.mkdir()
    (old / "fingerprints.json").write_text(json.dumps(dict(data=dict(train="x"), attempts=[dict(from_step=0)])))
    record_fingerprints(str(old), 500, data=dict(train="y"))
    assert samplers.measured_with(str(old), dict(fid=dict(fid=1.0)))["data"] == "train x then train y"
    # a latent run resumed across the day its periodic network began to name the decoder: one network, not two
    # (benchmarks/records/latent56c/adaptive_noise+likelihood_seed8); the decoder is compared as the final FID's
    lat = tmp_path / "latent"
    lat.mkdir()
    record_fingerprints(str(lat), 0, periodic_features=dict(network="n1", reference="r1"))
    record_fingerprints(str(lat), 2001, periodic_features=dict(network="n1", reference="r1", decoder="a1"))
    assert samplers.measured_with(str(lat), dict(fid=dict(fid=1.0)))["periodic"] == "n1 (reference r1)"
    record_fingerprints(str(lat), 2500, periodic_features=dict(network="n2", reference="r1", decoder="a1"))
    assert samplers.measured_with(str(lat), dict(fid=dict(fid=1.0)))["periodic"] == (
        "n1 (reference r1) then n2 (reference r1)"
    )


def test_the_recommended_likelihood_config_is_the_arm_its_table_measured(tmp_path):
    """configs/digits_likelihood.py cites benchmarks/records/ddpm56c's adaptive_noise+likelihood arm: with that
    record's seed, every field that defines a run equals the record's (check_run_identity raises on any other)."""
    import shutil

    from configs.digits_likelihood import get_config
    from training.checkpoint import WorkdirMismatch, check_run_identity

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    record = os.path.join(root, "benchmarks", "records", "ddpm56c", "adaptive_noise+likelihood_seed20")
    shutil.copy(os.path.join(record, "run_config.json"), tmp_path / "run_config.json")
    c = get_config()
    c.seed = 20
    check_run_identity(c, str(tmp_path))  # no error
    c.weighting.name = "none"
    with pytest.raises(WorkdirMismatch, match="weighting"):
        check_run_identity(c, str(tmp_path))


def test_a_text_table_drops_fid_shows_its_standard_errors_the_ar_line_beside_and_samples(tmp_path, monkeypatch):
    """A table of a process on tokens (no FID): the FID and KID columns go, the line under it gives the final
    estimates' standard errors, --beside pairs another benchmark's runs (the AR baseline) with uniform seed by seed
    (hand-computed differences, a seed measured on other data left out), and each run's first text samples follow;
    the samples file is part of a run's record."""

    import benchmarks.samplers as sp

    monkeypatch.setattr(sp, "BASE", "uniform")
    proto = dict(units="bits per token", images=256, bound="masked diffusion NELBO")

    def run(out, name, seed, value, stderr, data="t1", samples=("abc de", "fg hij", "klm")):
        wd = out / f"{name}_seed{seed}"
        os.makedirs(wd / "eval")
        rows = [{"step": s, "periodic/bpd_T8": value + 1.0 / s, "train_seconds": s / 10.0} for s in (250, 500)]
        (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (wd / "bench_seconds.json").write_text(json.dumps({"train": 60.0, "eval": 10.0}))
        (wd / "fingerprints.json").write_text(json.dumps(dict(data=dict(train=data, test="t2"))))
        (wd / "eval" / "samples_0000500.txt").write_text("".join(f"{s}\n" for s in samples))
        ev = dict(
            nll_bpd=dict(value=value, stderr=stderr, protocol=proto), samples=dict(path="eval/samples_0000500.txt")
        )
        (wd / "eval" / "step_0000500.json").write_text(json.dumps(ev))
        return str(wd)

    out, ar = tmp_path / "text", tmp_path / "text_ar"
    values = {"uniform": (2.75, 2.70), "antithetic": (2.70, 2.68)}
    for name, vs in values.items():
        for seed, v in enumerate(vs):
            run(out, name, seed, v, 0.013 if name == "uniform" else 0.011, samples=(f"{name} one", f"{name} two", "x"))
    run(ar, "uniform", 0, 2.60, 0.0)
    run(ar, "uniform", 1, 2.50, 0.0, data="other")  # another corpus: not paired
    run(ar, "uniform", 2, 2.55, 0.0)  # a seed the table lacks
    runs = sp.parse_runs("uniform,antithetic")
    results = {n: [dict(sp.load(sp.workdir_of(str(out), n, s)), seed=s) for s in (0, 1)] for n, _, _ in runs}
    monkeypatch.setattr(sys, "argv", ["samplers.py", "--out=/home/someone/bench", "--seeds=0,1"])
    md = sp.table(results, runs, [0, 1], "configs/text.py")
    assert md.splitlines()[0] == "`python benchmarks/samplers.py --out=<path> --seeds=0,1`"  # no machine's path
    header = next(line for line in md.splitlines() if line.startswith("| run"))
    assert "FID" not in header and "KID" not in header and header.count("|") == 9, header
    row = next(line for line in md.splitlines() if line.startswith("| antithetic"))
    assert row.count("|") == 9 and "-0.035 [" in row, row  # (-0.05 - 0.02) / 2
    assert "standard error (over sequences) at most 0.0130 bits per token, mean 0.0120" in md
    beside = sp.beside_section(results, [str(ar)])
    assert beside[1] == "Beside the table (--beside):"
    assert "uniform in text_ar (seeds 0, 1, 2): 2.550 ± 0.050 bits/dim (masked diffusion NELBO)" in beside[3]
    # 2.60 - 2.75; seed 1 read other data: left out, and said
    left_out = "seed 1 left out: data test t2/train other against test t2/train t1."
    assert beside[3].endswith(f"d = it - uniform: -0.150 over 1 shared seed(s); {left_out}")
    assert sp.samples_section(results, runs, str(out)) == [
        "",
        "Text samples of the final evaluation (seed 0, the first 2 of each run):",
        "",
        "- uniform:",
        "  `uniform one`",
        "  `uniform two`",
        "- antithetic:",
        "  `antithetic one`",
        "  `antithetic two`",
    ]
    monkeypatch.setattr(sp, "RIVALS", ("antithetic",))
    results["bell"] = [dict(r, final_bpd=r["final_bpd"] + 0.02 - 0.01 * r["seed"]) for r in results["antithetic"]]
    rival = sp.worse_and_rival(results, [*runs, ("bell", "bell", None)])
    assert rival[-1].startswith("- bell: Δ bits/dim +0.015 [") and rival[-1].endswith("higher in 2/2 seeds.")  # no FID
    kept = sp.keep_record(sp.workdir_of(str(out), "uniform", 0), str(tmp_path / "records"))
    assert os.path.exists(os.path.join(kept, "eval", "samples_0000500.txt"))


def test_a_benchmarks_json_names_what_it_ran_on_and_no_path_of_the_machine():
    """variance_ceiling.json and bound_reduction.json hold their arguments with absolute paths as <path> (relative
    ones kept) and the data hashes and environment of the measurement."""
    import argparse

    from benchmarks.samplers import ROOT, as_given, measured_here
    from conftest import tiny_config
    from core import fingerprint
    from data import data_fingerprints

    args = argparse.Namespace(workdir="/home/a/run", out="workdirs/vc", k=20, set=["data.path=/data/x", "seed=1"])
    assert as_given(args) == dict(workdir="<path>", out="workdirs/vc", k=20, set=["data.path=<path>", "seed=1"])
    assert fingerprint.without_paths("No such file: '/data/my dir/x.npy' (~/y, 1/2 s/it, https://a.org/b)") == (
        "No such file: '<path>' (<path>, 1/2 s/it, https://a.org/b)"
    )
    from benchmarks.variance_ceiling import in_repo

    assert in_repo(os.path.join(ROOT, "workdirs", "vc")) == os.path.join("workdirs", "vc")
    assert in_repo("/tmp/elsewhere/vc") == in_repo(os.path.dirname(ROOT)) == "<path>"
    c = tiny_config()
    here = measured_here(c)
    assert here["data"] == data_fingerprints(c.data) and len(here["data"]["train"]) == 16
    assert here["code"] == fingerprint.code_revision(ROOT) and here["processor"] == fingerprint.processor()


def test_the_loader_benchmark_s_json_names_its_environment_and_no_path(tmp_path):
    """benchmarks/loader.py's rates are speeds of this machine: its JSON holds the environment they were measured
    on (code, versions, processor, ...), and its arguments without the machine's paths."""
    import subprocess
    import sys

    from benchmarks.samplers import ROOT
    from core import fingerprint

    out = tmp_path / "loader.json"
    cmd = [sys.executable, "benchmarks/loader.py", "--datasets=digits", "--workers=0", "--seconds=0.2", "--consumers="]
    r = subprocess.run([*cmd, f"--json={out}", f"--dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    text = out.read_text()
    rec = json.loads(text)
    assert rec["environment"]["processor"] == fingerprint.processor() and "jax" in rec["environment"]["versions"]
    assert rec["args"]["json"] == rec["args"]["dir"] == "<path>" and str(tmp_path) not in text
    assert rec["loader"]["digits/0"] > 0


@pytest.mark.slow  # trains a tiny run (about a minute, its compilation mostly): CI's second job
def test_the_reward_benchmark_s_json_names_what_it_ran_on_and_no_path(tmp_path):
    """benchmarks/reward.py's reward.json: its runs' summaries beside the data hashes and environment it was measured
    with and its arguments without the machine's paths."""
    import subprocess
    import sys

    from benchmarks.samplers import ROOT, load_config
    from conftest import TINY
    from core import fingerprint
    from data import data_fingerprints

    sets = [f"--set={k}={v}".replace(" ", "") for k, v in TINY.items() if k != "train.num_steps"]
    cmd = [sys.executable, "benchmarks/reward.py", f"--out={tmp_path}", "--steps=8", "--skip=1", *sets]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    text = (tmp_path / "reward.json").read_text()
    rec = json.loads(text)
    assert list(rec["runs"]) == ["adaptive"] and rec["runs"]["adaptive"]
    c = load_config("configs/default.py", [s.partition("=")[2] for s in sets])
    assert rec["measured_with"]["data"] == data_fingerprints(c.data)
    assert rec["measured_with"]["code"] == fingerprint.code_revision(ROOT)
    assert rec["arguments"]["out"] == "<path>" and str(tmp_path) not in text
