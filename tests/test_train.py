import chex
import jax
import numpy as np
import pytest

from data import load_split
from data.pipeline import global_batch_indices
from training.train import build, initial_state, train


def batches(c, steps):
    src = load_split(c, "train")
    return [src.get(global_batch_indices(c.seed, s, c.train.batch_size, len(src))) for s in range(steps)]


def run_steps(c, n, step_fn=None):
    setup = build(c)
    state = initial_state(setup)
    fn = step_fn(setup) if step_fn else setup.step_fn
    for b in batches(c, n):
        state, metrics = fn(state, jax.device_put(b, setup.batch_sharding))
    return state, metrics


def test_eight_devices_agree_with_one(tiny):
    s8, m8 = run_steps(tiny(**{"mesh.data": 8}), 3)
    s1, m1 = run_steps(tiny(**{"mesh.data": 1}), 3)
    assert len(s8.params["params"]["Conv_0"]["kernel"].sharding.device_set) == 8
    chex.assert_trees_all_close(jax.device_get(s8.params), jax.device_get(s1.params), rtol=2e-4, atol=2e-6)
    chex.assert_trees_all_close(jax.device_get(s8.ema_params), jax.device_get(s1.ema_params), rtol=2e-4, atol=2e-6)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-4)


def test_train_step_traces_once(tiny):
    def counted(setup):
        raw = chex.assert_max_traces(setup.train_step, n=1)
        return jax.jit(raw, in_shardings=(setup.state_shardings, setup.batch_sharding), donate_argnums=(0,))

    chex.clear_trace_counter()
    state, metrics = run_steps(tiny(), 4, counted)  # a 2nd trace would raise
    assert int(state.step) == 4


def test_timesteps_differ_across_the_batch_shards(tiny):
    _, m = run_steps(tiny(**{"diagnostics.t_bins": 1000, "diffusion.num_timesteps": 1000}), 1)
    assert int(np.count_nonzero(np.asarray(m["t_hist"]))) > 12  # 16 draws from 1000: nearly all distinct


def test_resume_equals_uninterrupted(tiny, tmp_path):
    c = tiny(**{"train.num_steps": 6, "train.ckpt_every": 3, "train.log_every": 3})
    full = train(c, str(tmp_path / "full"))
    half = tiny(**{"train.num_steps": 3, "train.ckpt_every": 3, "train.log_every": 3})
    train(half, str(tmp_path / "resumed"))
    resumed = train(c, str(tmp_path / "resumed"))
    assert int(resumed.step) == 6
    chex.assert_trees_all_equal(jax.device_get(full.params), jax.device_get(resumed.params))
    chex.assert_trees_all_equal(jax.device_get(full.opt_state), jax.device_get(resumed.opt_state))
    chex.assert_trees_all_equal(jax.device_get(full.ema_params), jax.device_get(resumed.ema_params))
    chex.assert_trees_all_equal(jax.device_get(full.sampler_state), jax.device_get(resumed.sampler_state))
