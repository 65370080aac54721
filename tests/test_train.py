import os

import chex
import jax
import numpy as np
import pytest

from data import load_split
from data.pipeline import global_batch_indices
from data.pipeline import BatchIterator
from samplers import SAMPLERS
from training import checkpoint as ckpt
from training.train import TrainingDiverged, build, initial_state, train


def batches(c, steps):
    src = load_split(c, "train")
    return [src.get(global_batch_indices(c.seed, s, c.train.batch_size, len(src))) for s in range(steps)]


def run_steps(c, n, step_fn=None, history=None):
    setup = build(c)
    state = initial_state(setup)
    fn = step_fn(setup) if step_fn else setup.step_fn
    for b in batches(c, n):
        state, metrics = fn(state, jax.device_put(b, setup.batch_sharding))
        if history is not None:
            history.append(jax.device_get(metrics))
    return state, metrics


def test_eight_devices_agree_with_one_and_the_step_traces_once(tiny):
    def counted(setup):  # the 8-device step, jitted as train.py does, raising on a second trace
        return setup.jit_step(chex.assert_max_traces(setup.train_step, n=1))

    chex.clear_trace_counter()
    hist = []
    s8, m8 = run_steps(tiny(**{"mesh.data": 8}), 3, counted, hist)
    # step 0 is a policy update whose model update changes nothing (the warm-up's learning rate is 0 there):
    # with common noise the reward is exactly 0; at step 2 (lr > 0) it is not
    assert float(hist[0]["sampler/reward_mean"]) == 0.0 and float(hist[0]["lr"]) == 0.0
    assert float(hist[2]["sampler/reward_mean"]) != 0.0
    s1, m1 = run_steps(tiny(**{"mesh.data": 1}), 3)
    assert len(s8.params["params"]["Conv_0"]["kernel"].sharding.device_set) == 8
    chex.assert_trees_all_close(jax.device_get(s8.params), jax.device_get(s1.params), rtol=2e-4, atol=2e-6)
    chex.assert_trees_all_close(jax.device_get(s8.ema_params), jax.device_get(s1.ema_params), rtol=2e-4, atol=2e-6)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-4)
    # the learned sampler's state (policy, its optimizer, the sweep buffer, S) after two policy updates (steps 0, 2)
    assert int(s8.sampler_state["updates"]) == 2
    chex.assert_trees_all_close(jax.device_get(s8.sampler_state), jax.device_get(s1.sampler_state), rtol=2e-3, atol=2e-5)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_gives_each_device_shard_different_timesteps(tiny, name):
    from diffusion import make_schedule
    from samplers import make_sampler
    from training.mesh import batch_sharding, make_mesh

    c = tiny(**{"sampler.name": name, "train.batch_size": 64})
    sampler = make_sampler(c, make_schedule("linear", 1000))
    sh = batch_sharding(make_mesh(c))
    x0 = jax.device_put(np.zeros((64, 8, 8, 1), np.float32), sh)
    state = sampler.init(jax.random.PRNGKey(0), x0)
    t, w, _ = jax.jit(sampler.sample, out_shardings=(sh, sh, None))(state, jax.random.PRNGKey(1), x0)
    shards = np.asarray(t).reshape(8, 8)  # identical images: only the random draws tell the shards apart
    assert len({tuple(r) for r in shards}) == 8
    assert len(np.unique(shards)) > 30 and shards.min() >= 0 and shards.max() <= 999
    np.testing.assert_allclose(np.asarray(w), 1.0, rtol=1e-6)  # importance weights start at 1 (uniform)


# each sampler with a weighting, so that every weighting is in some resumed run
WEIGHTING_OF = {"uniform": "min_snr", "antithetic": "p2", "speed": "speed", "lognormal": "none",
                "logitnormal": "min_snr", "loss_second_moment": "p2", "grad_variance": "speed", "adaptive": "none"}


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_resume_equals_uninterrupted_for_every_sampler(tiny, tmp_path, sampler):
    """6 steps in one go equal 3 steps, an orbax checkpoint restored into a fresh state, and 3 more: bit for bit,
    sampler state and data order included."""
    c = tiny(**{"sampler.name": sampler, "weighting.name": WEIGHTING_OF[sampler], "weighting.speed.tau": 500,
                "sampler.grad_variance.num_bins": 4, "sampler.grad_variance.update_every": 2})
    setup = build(c)
    src = load_split(c, "train")

    def run(state, start, stop):
        it = BatchIterator(src, c.seed, c.train.batch_size, setup.batch_sharding, start_step=start)
        try:
            for _ in range(start, stop):
                state, _ = setup.step_fn(state, next(it)[1])
        finally:
            it.close()
        return state

    mngr = ckpt.make_manager(c, str(tmp_path))
    half = run(initial_state(setup), 0, 3)
    ckpt.save(mngr, 3, half)
    full = jax.device_get(run(half, 3, 6))  # the same state goes on, uninterrupted
    mngr.close()
    mngr = ckpt.make_manager(c, str(tmp_path))  # a fresh manager, as a new process would have
    restored = ckpt.restore(mngr, mngr.latest_step(), ckpt.abstract_with_shardings(setup.abstract_state,
                                                                                   setup.state_shardings), "")
    resumed = jax.device_get(run(restored, 3, 6))
    assert int(resumed.step) == 6
    chex.assert_trees_all_equal(full, resumed)
    if sampler in ("loss_second_moment", "grad_variance", "adaptive"):  # a sampler state that moved
        init = jax.device_get(initial_state(setup).sampler_state)
        assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(init), jax.tree.leaves(full.sampler_state)))


def test_non_finite_policy_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tiny, tmp_path):
    # an absurd policy learning rate: the first policy update (step 0) leaves finite but huge weights, whose
    # outputs at step 1 are not finite
    c = tiny(**{"train.num_steps": 3, "train.ckpt_every": 1, "train.log_every": 1, "sampler.adaptive.policy_lr": 1e38})
    with pytest.raises(TrainingDiverged, match=r"step 1: non-finite sampler outputs; the last good checkpoint is step 1"):
        train(c, str(tmp_path))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1"]
