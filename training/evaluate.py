"""Evaluation of a workdir's latest checkpoint (EMA parameters): `python main.py --mode=eval --workdir=DIR`.

Writes DIR/eval/step_NNNNNNN.json, each number next to its protocol, and a sample grid DIR/eval/samples_NNNNNNN.png.
- nll_bpd: the full variational bound in bits/dim (sum of L_t over all T timesteps, each with its own noise, plus
  the prior term; improved-diffusion's calc_bpd_loop with clip_denoised) averaged over config.eval.nll_images
  images of the test split (-1: all of them), float32, on the EMA parameters. The bound is an upper bound on the NLL.
"""
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from data import load_split
from diffusion import gaussian as g
from training import checkpoint as ckpt
from training import report
from training.step import make_apply, to_float
from training.validate import ConfigError


class NoCheckpoint(ConfigError):
    pass


def restore_latest(setup, workdir):
    """(step, state) of the latest checkpoint, after checking that the workdir holds one of this config's run."""
    if "://" not in workdir and not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise NoCheckpoint(f"--workdir={workdir} has no checkpoints/ to evaluate: train first, or point --workdir at "
                           f"a training run")
    mngr = ckpt.make_manager(setup.config, workdir)
    try:
        step = mngr.latest_step()
        if step is None:
            raise NoCheckpoint(f"--workdir={workdir} has no complete checkpoint to evaluate: train first")
        ckpt.check_run_identity(setup.config, workdir)  # the bound depends on the run's schedule, target, variance
        abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
        return step, ckpt.restore(mngr, step, abstract, workdir)
    finally:
        mngr.close()


def bound_bpd(setup, params, images_u8, key):
    """(mean bits/dim, per-image bits/dim [N], seconds) of the full bound over images_u8 [N, H, W, C]."""
    c, s = setup.config, setup.schedule
    apply = make_apply(setup.model.clone(dtype=jnp.float32))
    # as few equal batches of at most eval.batch_size as cover N (one compiled shape, little padding), each a
    # multiple of the device count
    ceil_div = lambda a, b: -(-a // b)
    N, n_dev = len(images_u8), setup.mesh.shape["data"]
    B = ceil_div(ceil_div(N, ceil_div(N, c.eval.batch_size)), n_dev) * n_dev

    @jax.jit
    def batch_nll(params, x_u8, key):
        nll, _, _ = g.nll_bpd(lambda x, t: apply(params, x, t), s, c.diffusion.target, c.diffusion.variance,
                              to_float(x_u8), key, clip_denoised=True, max_rows=c.eval.chunk_rows)
        return nll

    out, t0 = [], time.perf_counter()
    for i in range(0, N, B):
        x = images_u8[i:i + B]
        pad = B - len(x)
        x = np.concatenate([x, np.repeat(x[:1], pad, axis=0)]) if pad else x
        nll = batch_nll(params, jax.device_put(x, setup.batch_sharding), jax.random.fold_in(key, i))
        out.append(np.asarray(nll)[:B - pad])
    per_image = np.concatenate(out)
    return float(per_image.mean()), per_image, time.perf_counter() - t0


def evaluate(config, workdir: str) -> dict:
    """Evaluate the latest checkpoint in `workdir`; returns the record written to DIR/eval/step_N.json."""
    from training.train import build, generate

    if "://" not in workdir:
        workdir = os.path.abspath(workdir)
    setup = build(config)
    c = config
    step, state = restore_latest(setup, workdir)
    key = jax.random.fold_in(jax.random.PRNGKey(c.seed), 0xE7A1)
    test = load_split(c, "test")
    n = len(test) if c.eval.nll_images == -1 else min(c.eval.nll_images, len(test))
    images = test.get(np.arange(n))
    nll, per_image, seconds = bound_bpd(setup, state.ema_params, images, key)
    record = dict(
        checkpoint_step=int(step), workdir=workdir, dataset=c.data.name,
        nll_bpd=dict(value=nll, stderr=float(per_image.std(ddof=1) / np.sqrt(n)) if n > 1 else None, protocol=dict(
            split="test", images=int(n), timesteps=c.diffusion.num_timesteps, parameters="EMA",
            bound="sum_t L_t + L_T, fresh noise per t, clip_denoised, discretised decoder at t=0", seconds=seconds)))
    if jax.process_index() == 0:
        out = os.path.join(workdir, "eval")
        os.makedirs(out, exist_ok=True)
        samples = generate(setup, state.ema_params, jax.random.fold_in(key, 1), c.eval.num_samples)
        grid = os.path.join(out, f"samples_{step:07d}.png")
        report.save_grid(samples, grid)
        record["samples"] = dict(path=grid, protocol=dict(
            num=c.eval.num_samples, method=c.sample.method,
            steps=c.sample.ddim_steps if c.sample.method == "ddim" else c.diffusion.num_timesteps, parameters="EMA"))
        path = os.path.join(out, f"step_{step:07d}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=2)
        os.replace(path + ".tmp", path)
        record["path"] = path
    return record
