"""--mode=eval: the full bound on the test split and samples from the latest checkpoint, with their protocol."""

import json
import os
import shutil
import subprocess

import jax
import numpy as np
import pytest

from conftest import ROOT, lock_holder, main_cmd, restore_checkpoint, run_main, tiny_config, tiny_flags

FID = {
    "eval.fid.num_samples": 24,
    "eval.fid.steps": 3,
    "eval.fid.kid_subsets": 10,
    "eval.fid.batch_size": 16,
}  # two sampling calls: 16 + 8
PERIODIC = {
    "eval.periodic.every": 2,
    "eval.periodic.nll_images": 16,
    "eval.periodic.nll_timesteps": 6,
    "eval.periodic.num_samples": 16,
    "eval.periodic.steps": 3,
}


def eval_cmd(workdir, *extra):
    return main_cmd("--mode=eval", f"--workdir={workdir}", *tiny_flags(), *extra)


def test_eval_writes_the_bound_and_samples_with_their_protocol(tmp_path, finished_run):
    wd = tmp_path / "run"
    shutil.copytree(finished_run[0], wd)
    fid_flags = [f"--config.{k}={v}" for k, v in FID.items()]
    holder = lock_holder(wd)  # as a training run writing the workdir: evaluation only reads, and runs beside it
    try:
        r = subprocess.run(
            eval_cmd(wd, "--config.eval.nll_images=16", "--config.eval.num_samples=4", *fid_flags),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.stdin.close()
        holder.wait()
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.load(open(wd / "eval" / "step_0000004.json"))
    assert rec["checkpoint_step"] == 4 and f"Results: {wd}/eval/step_0000004.json" in r.stdout
    assert r.stdout.startswith("checkpoint 4: test NLL <= ")
    assert f"note: a run is writing --workdir={wd} (process {holder.pid} on host " in r.stderr, r.stderr[-3000:]
    assert "; evaluating checkpoint 4, its newest complete one now" in r.stderr
    nll = rec["nll_bpd"]
    assert nll["protocol"]["images"] == 16 and nll["protocol"]["timesteps"] == 1000
    assert nll["protocol"]["parameters"] == "EMA" and nll["protocol"]["split"] == "test"
    # a barely trained network: the bound is finite and far above a trained model's (about 6 bits/dim here)
    assert 6.0 < nll["value"] < 100.0 and nll["stderr"] > 0
    assert rec["samples"]["protocol"] == {"num": 4, "method": "ddim", "steps": 5, "parameters": "EMA"}
    assert os.path.exists(wd / rec["samples"]["path"])
    # what it was measured with, as content hashes; no path of this machine (a path means nothing on the next one)
    text = (wd / "eval" / "step_0000004.json").read_text()
    assert str(tmp_path) not in text and os.path.expanduser("~") + "/" not in text and rec["workdir"] == "run"
    from core import fingerprint
    from data import digits_arrays
    from evaluation import classifier

    (train, train_labels), (test, test_labels) = digits_arrays()
    digits = {"train": fingerprint.of_arrays(train, train_labels), "test": fingerprint.of_arrays(test, test_labels)}
    env = rec["fingerprints"]
    assert env["data"] == digits and env["versions"]["jax"] == jax.__version__
    assert env["processor"] == fingerprint.processor() and env["code"] == fingerprint.code_revision(ROOT)
    network = classifier.NETWORKS["digits"]
    assert rec["fid"]["feature_network"] == rec["fid"]["test_split"]["feature_network"] == network
    assert rec["fid"]["protocol"]["fingerprint"]["network"] == network
    assert "decoder" not in rec["fid"]["protocol"]["fingerprint"]  # pixels: no first stage
    assert rec["fid"]["protocol"]["fingerprint"]["reference"] == digits["train"]
    assert rec["fid"]["protocol"]["weights"] == "committed: evaluation/weights/digits_classifier.npz"
    fid = rec["fid"]
    p = fid["protocol"]
    assert (p["samples"], p["method"], p["steps"], p["parameters"]) == (24, "ddim", 3, "EMA")
    assert p["feature_space"] == "digits_classifier" and "1500 training images of digits" in p["reference"]
    assert fid["fid"] > 0 and fid["kid_subsets"] == 10 and fid["kid_subset_size"] == 24
    # the floor next to it: the first 24 test digits against the same reference, as computed here
    from data import load_split
    from evaluation.features import make_feature_space

    c = tiny_config(**FID)
    space = make_feature_space(c)
    direct = space.score(load_split(c.data, "test").get(np.arange(24)), 10, 1000)
    assert fid["test_split"]["images"] == 24
    np.testing.assert_allclose(
        [fid["test_split"]["fid"], fid["test_split"]["kid"]], [direct["fid"], direct["kid"]], rtol=1e-9
    )
    assert fid["fid"] > fid["test_split"]["fid"]  # 4 training steps do not make digits
    assert "FID" in r.stdout


def test_the_bound_is_the_mean_of_per_image_bounds_in_any_batching():
    from data import load_split
    from evaluation.bound import bound_bpd
    from training.setup import build, initial_state
    from training.step import make_apply, to_float

    c = tiny_config(**{"eval.batch_size": 8})
    setup = build(c)
    params = jax.tree.map(lambda p: p + 0.01, initial_state(setup).ema_params)  # a non-zero network
    images = load_split(c.data, "test").get(np.arange(12))  # 12 images on 8 devices: batches of 8 and 4 + 4 padding
    key = jax.random.PRNGKey(5)
    mean, per_image, _ = bound_bpd(setup, params, images, key)
    apply = make_apply(setup.model)
    batches = [(0, images[:8], 8), (8, np.concatenate([images[8:], np.repeat(images[8:9], 4, axis=0)]), 4)]
    nll = jax.jit(
        lambda x, k: setup.process.nll_bpd(lambda xt, t: apply(params, xt, t), to_float(x), k, pixels=True)[0]
    )
    direct = [np.asarray(nll(x, jax.random.fold_in(key, i)))[:n] for i, x, n in batches]
    np.testing.assert_allclose(per_image, np.concatenate(direct), rtol=1e-5)
    assert mean == np.mean(per_image) and per_image.shape == (12,)


def test_the_stratified_bound_is_unbiased_and_its_standard_error_is_its_spread():
    """eval.bound_strata on a tiny network: over 40 independent draws (timesteps and noise) of the estimate from
    t = 0 at 4 noises and 8 strata of 1..999 with m = 4 timesteps each, the mean equals the full 1,000-step bound to
    within 3 standard errors of that mean (the reported one over sqrt(40), with the full bound's own spread over
    noise), and the reported standard error is the draws' spread to within a factor of 1.5 (one that forgot the
    1 / m would be 2x the spread). The full bound is the mean of two with their own noise; its variance over noise,
    sum_t var(Lbar_t) (Lbar_t: the mean over the images of L_t), is estimated from their per-timestep differences,
    sum_t (Lbar_t - Lbar'_t)^2 / 2, 1,000 independent terms."""
    from data import load_split
    from evaluation.bound import eval_bound, stratified_bound
    from training.setup import build, initial_state
    from training.step import make_apply, to_float

    c = tiny_config(**{"eval.bound_strata": 8, "eval.bound_per_stratum": 4, "eval.bound_decoder_draws": 4})
    setup = build(c)
    params = jax.tree.map(lambda p: p + 0.01, initial_state(setup).ema_params)  # a non-zero network
    images = load_split(c.data, "test").get(np.arange(8))
    apply = make_apply(setup.model)
    full = jax.jit(
        lambda k: setup.process.nll_bpd(lambda x, t: apply(params, x, t), to_float(images), k, max_rows=8192)[:2]
    )
    (nll1, terms1), (nll2, terms2) = full(jax.random.PRNGKey(1)), full(jax.random.PRNGKey(2))
    ref = (float(np.mean(nll1)) + float(np.mean(nll2))) / 2
    lbar = [np.asarray(terms, np.float64).mean(0) for terms in (terms1, terms2)]
    var_ref = float(np.sum((lbar[0] - lbar[1]) ** 2)) / 2 / 2
    keys = jax.random.split(jax.random.PRNGKey(3), 40)
    draws = [stratified_bound(setup, params, images, k, 8, 4, 4) for k in keys]
    value = np.array([d["value"] for d in draws])
    reported = np.sqrt(np.mean([d["estimate_stderr"] ** 2 for d in draws]))
    tol = 3 * np.sqrt(reported**2 / len(draws) + var_ref)
    assert abs(value.mean() - ref) < tol, (value.mean(), ref, tol)
    assert 1 / 1.5 < reported / value.std(ddof=1) < 1.5, (reported, value.std(ddof=1))
    assert all(d["per_image"].shape == (8,) and d["stderr"] > 0 for d in draws)
    # --mode=eval's record with eval.bound_strata: the same estimate, its standard error next to it, the design
    rec = eval_bound(setup, params, images, keys[0])
    assert (rec["value"], rec["estimate_stderr"]) == (draws[0]["value"], draws[0]["estimate_stderr"])
    p = rec["protocol"]
    assert (p["strata"], p["per_stratum"], p["decoder_draws"], p["timesteps_per_image"]) == (8, 4, 4, 36)


def test_eval_without_a_checkpoint_is_one_line_and_writes_nothing(tmp_path):
    r = subprocess.run(eval_cmd(tmp_path / "empty"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "has no checkpoints/ to evaluate: train first" in err[0], r.stderr[-2000:]
    assert not (tmp_path / "empty").exists()


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_periodic_eval_is_logged_labelled_and_equals_a_direct_evaluation(tmp_path):
    from data import load_split
    from diffusion.generate import generate
    from evaluation.bound import bound_bpd
    from evaluation.features import make_feature_space
    from evaluation.periodic import PeriodicEval
    from training.setup import build

    wd = tmp_path / "periodic"
    r = run_main(wd, *[f"--config.{k}={v}" for k, v in PERIODIC.items()])
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in open(wd / "metrics.jsonl")]
    per = [row for row in rows if "periodic/bpd_T6" in row]
    assert [row["step"] for row in per] == [2, 4]
    from evaluation.classifier import NETWORKS
    from evaluation.quality import fid_tag

    measured = json.load(open(wd / "fingerprints.json"))
    assert measured["periodic_features"]["space"] == "digits_classifier"
    assert measured["periodic_features"]["network"] == NETWORKS["digits"]
    # the FID's name says what it was measured with: the tag of the fingerprint recorded beside it
    tag = fid_tag({k: v for k, v in measured["periodic_features"].items() if k != "space"})
    fid, kid = f"periodic/fid_N16/{tag}", f"periodic/kid_N16/{tag}"
    assert all({fid, kid, "periodic/seconds", "train_seconds"} <= set(row) for row in per)
    train_s = [row["train_seconds"] for row in rows if "loss" in row]
    assert len(train_s) == 2 and 0 < train_s[0] < train_s[1]
    protocol = json.load(open(wd / "eval" / "periodic_protocol.json"))
    assert "16 test images" in protocol["nll"] and "16 samples (ddim, 3 steps)" in protocol["fid"]
    assert protocol["fid"].startswith(f"fid_N16/{tag} / kid_N16/{tag}: ") and NETWORKS["digits"] in protocol["fid"]
    # the step-4 numbers again, here, from the checkpoint's EMA parameters with the documented fixed keys
    c = tiny_config(**PERIODIC)
    setup = build(c)
    _, state = restore_checkpoint(wd, 4)
    ema = jax.device_put(state["ema_params"], jax.sharding.NamedSharding(setup.mesh, jax.sharding.PartitionSpec()))
    key = jax.random.PRNGKey(PeriodicEval.KEY)
    bpd, _, _ = bound_bpd(setup, ema, load_split(c.data, "test").get(np.arange(16)), key, num_t=6)
    samples = generate(setup, ema, jax.random.fold_in(key, 1), 16, "ddim", 3)
    scores = make_feature_space(c).score(samples, c.eval.fid.kid_subsets, c.eval.fid.kid_subset_size)
    np.testing.assert_allclose(
        [per[1]["periodic/bpd_T6"], per[1][fid], per[1][kid]],
        [bpd, scores["fid"], scores["kid"]],
        rtol=1e-5,
    )

    # a run stopped after its step-4 checkpoint but before that step's evaluation was logged: the resumed run
    # evaluates step 4 first, then goes on (train_seconds continues from the last record)
    with open(wd / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows if not (row["step"] == 4 and "periodic/seconds" in row))
    r = run_main(wd, *[f"--config.{k}={v}" for k, v in PERIODIC.items()], steps=6)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in open(wd / "metrics.jsonl")]
    assert [row["step"] for row in rows if "periodic/bpd_T6" in row] == [2, 4, 6]
    again = next(row for row in rows if row["step"] == 4 and "periodic/bpd_T6" in row)
    assert again["periodic/bpd_T6"] == per[1]["periodic/bpd_T6"] and again["train_seconds"] == train_s[1]
    assert [row["train_seconds"] > train_s[1] for row in rows if row["step"] == 6] == [True, True]
    attempts = json.load(open(wd / "fingerprints.json"))["attempts"]
    assert [a["from_step"] for a in attempts] == [0, 4]  # each attempt says what it ran on
