"""--mode=eval: the full bound on the test split and samples from the latest checkpoint, with their protocol."""
import json
import os
import shutil
import subprocess

import jax
import numpy as np

from conftest import main_cmd, tiny_config, tiny_flags


def eval_cmd(workdir, *extra):
    return main_cmd("--mode=eval", f"--workdir={workdir}", *tiny_flags(), *extra)


def test_eval_writes_the_bound_and_samples_with_their_protocol(tmp_path, finished_run):
    wd = tmp_path / "run"
    shutil.copytree(finished_run[0], wd)
    r = subprocess.run(eval_cmd(wd, "--config.eval.nll_images=16", "--config.eval.num_samples=4"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.load(open(wd / "eval" / "step_0000004.json"))
    assert rec["checkpoint_step"] == 4 and f"Results: {wd}/eval/step_0000004.json" in r.stdout
    nll = rec["nll_bpd"]
    assert nll["protocol"]["images"] == 16 and nll["protocol"]["timesteps"] == 1000
    assert nll["protocol"]["parameters"] == "EMA" and nll["protocol"]["split"] == "test"
    # a barely trained network: the bound is finite and far above a trained model's (about 6 bits/dim here)
    assert 6.0 < nll["value"] < 100.0 and nll["stderr"] > 0
    assert rec["samples"]["protocol"] == {"num": 4, "method": "ddim", "steps": 5, "parameters": "EMA"}
    assert os.path.exists(rec["samples"]["path"])


def test_the_bound_is_the_mean_of_per_image_bounds_in_any_batching():
    from diffusion import gaussian as g
    from training.evaluate import bound_bpd
    from training.step import make_apply, to_float
    from training.train import build, initial_state
    from data import load_split

    c = tiny_config(**{"eval.batch_size": 8})
    setup = build(c)
    params = jax.tree.map(lambda p: p + 0.01, initial_state(setup).ema_params)  # a non-zero network
    images = load_split(c, "test").get(np.arange(12))  # 12 images on 8 devices: batches of 8 and 4 + 4 padding
    key = jax.random.PRNGKey(5)
    mean, per_image, _ = bound_bpd(setup, params, images, key)
    apply = make_apply(setup.model)
    batches = [(0, images[:8], 8), (8, np.concatenate([images[8:], np.repeat(images[8:9], 4, axis=0)]), 4)]
    nll = jax.jit(lambda x, k: g.nll_bpd(lambda xt, t: apply(params, xt, t), setup.schedule, "eps", "fixed_large",
                                         to_float(x), k, clip_denoised=True)[0])
    direct = [np.asarray(nll(x, jax.random.fold_in(key, i)))[:n] for i, x, n in batches]
    np.testing.assert_allclose(per_image, np.concatenate(direct), rtol=1e-5)
    assert mean == np.mean(per_image) and per_image.shape == (12,)


def test_eval_without_a_checkpoint_is_one_line_and_writes_nothing(tmp_path):
    r = subprocess.run(eval_cmd(tmp_path / "empty"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "has no checkpoints/ to evaluate: train first" in err[0], r.stderr[-2000:]
    assert not (tmp_path / "empty").exists()
