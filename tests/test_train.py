import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from core.traces import TRACES
from data import load_split
from data.pipeline import global_batch_indices
from drivers.train import TrainingDiverged, train
from samplers import SAMPLERS
from training import checkpoint as ckpt
from training.setup import build, initial_state


def batches(c, steps):
    src = load_split(c.data, "train")
    return [src.get(global_batch_indices(c.seed, s, c.train.batch_size, len(src))) for s in range(steps)]


def run_steps(c, n, history=None):
    setup = build(c)
    state = initial_state(setup)
    fn = setup.step_for()  # the program that decides the sampler's update on the device
    for b in batches(c, n):
        state, metrics = fn(state, jax.device_put(b, setup.batch_sharding))
        if history is not None:
            history.append(jax.device_get(metrics))
    return state, metrics


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_eight_devices_agree_with_one_and_the_step_traces_once(tiny):
    TRACES.clear()
    hist = []
    s8, m8 = run_steps(tiny(**{"mesh.data": 8}), 3, hist)
    assert TRACES[("step", None)] == 1  # three steps, one trace
    # step 0 is a policy update, and the warm-up starts at lr / warmup_steps (as the reference), so the model moves
    # and the first reward is not 0; the logged lr is the optimizer's: lr (step + 1) / warmup
    lr, warmup = 1e-3, 2
    assert [float(h["lr"]) for h in hist] == pytest.approx([lr / warmup, lr, lr], rel=1e-6)
    assert float(hist[0]["sampler/reward_mean"]) != 0.0 and float(hist[2]["sampler/reward_mean"]) != 0.0
    s1, m1 = run_steps(tiny(**{"mesh.data": 1}), 3)
    assert len(s8.params["params"]["Conv_0"]["kernel"].sharding.device_set) == 8
    chex.assert_trees_all_close(jax.device_get(s8.params), jax.device_get(s1.params), rtol=2e-4, atol=2e-6)
    chex.assert_trees_all_close(jax.device_get(s8.ema_params), jax.device_get(s1.ema_params), rtol=2e-4, atol=2e-6)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-4)
    # the learned sampler's state after two policy updates (steps 0, 2): the sweep buffer (its rows computed on
    # 25 rows per device here, all on one device there), S, the rewards, and the policy gradient (Adam's first
    # moment). The rewards are differences of nearly equal bounds, so float rounding moves them by ~0.3%; Adam's
    # normalised step turns that into up to one step (policy_lr) on parameters whose gradient is near zero.
    a, b = jax.device_get(s8.sampler_state), jax.device_get(s1.sampler_state)
    assert int(a.updates) == int(b.updates) == 2 and int(a.sweep_count) == int(b.sweep_count) == 2
    np.testing.assert_array_equal(a.probe_times, b.probe_times)
    chex.assert_trees_all_close((a.sweep_rows, a.sweep_totals), (b.sweep_rows, b.sweep_totals), rtol=1e-3, atol=1e-6)
    assert float(a.reward) == pytest.approx(float(b.reward), rel=1e-2) and abs(float(b.reward)) > 1e-4
    for x, y in zip(jax.tree.leaves(a.opt[1][0].mu), jax.tree.leaves(b.opt[1][0].mu)):
        np.testing.assert_allclose(x, y, rtol=0, atol=0.02 * np.abs(y).max())
    chex.assert_trees_all_close(a.policy, b.policy, rtol=0, atol=1e-2)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_gives_each_device_shard_different_timesteps(tiny, name):
    from diffusion import DDPM, make_schedule
    from samplers import make_sampler
    from training.mesh import batch_sharding, make_mesh

    c = tiny(**{"sampler.name": name, "train.batch_size": 64})
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", 1000)), c.train.batch_size)
    sh = batch_sharding(make_mesh(c.mesh))
    x0 = jax.device_put(np.zeros((64, 8, 8, 1), np.float32), sh)
    state = sampler.init(jax.random.PRNGKey(0), x0)
    t, w, _ = jax.jit(sampler.sample, out_shardings=(sh, sh, None))(state, jax.random.PRNGKey(1), x0)
    shards = np.asarray(t).reshape(8, 8)  # identical images: only the random draws tell the shards apart
    assert len({tuple(r) for r in shards}) == 8
    assert len(np.unique(shards)) > 30 and shards.min() >= 0 and shards.max() <= 999
    np.testing.assert_allclose(np.asarray(w), 1.0, rtol=1e-6)  # importance weights start at 1 (uniform)


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_non_finite_policy_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tiny, tmp_path):
    # an absurd policy learning rate: the first policy update (step 0) leaves finite but huge weights, whose
    # outputs at step 1 are not finite
    c = tiny(**{"train.num_steps": 3, "train.ckpt_every": 1, "train.log_every": 1, "sampler.adaptive.policy_lr": 1e38})
    with pytest.raises(
        TrainingDiverged, match=r"step 1: non-finite sampler outputs; the last good checkpoint is step 1"
    ):
        train(c, str(tmp_path))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1"]


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_sharded_parameters_give_the_same_results_and_checkpoint(tiny, tmp_path):
    c_rep = tiny(**{"sampler.name": "uniform", "mesh.data": 8})
    c_fsdp = tiny(**{"sampler.name": "uniform", "mesh.data": 8, "mesh.shard_params": True})
    s_rep, m_rep = run_steps(c_rep, 3)
    s_fsdp, m_fsdp = run_steps(c_fsdp, 3)
    kernel = s_fsdp.params["params"]["Conv_0"]["kernel"]  # [3, 3, 1, 8]: its 8 output channels over 8 devices
    assert kernel.sharding.spec == P(None, None, None, "data") and kernel.addressable_shards[0].data.shape[-1] == 1
    assert s_fsdp.opt_state[1][0].mu["params"]["Conv_0"]["kernel"].sharding.spec == P(None, None, None, "data")
    chex.assert_trees_all_close(jax.device_get(s_fsdp.params), jax.device_get(s_rep.params), rtol=2e-4, atol=2e-6)
    assert float(m_fsdp["loss"]) == pytest.approx(float(m_rep["loss"]), rel=1e-4)
    setup = build(c_fsdp)  # a sharded state checkpoints and restores into the same shardings
    mngr = ckpt.make_manager(c_fsdp, str(tmp_path))
    ckpt.save(mngr, 3, s_fsdp)
    back = ckpt.restore(mngr, 3, ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings), "")
    assert back.params["params"]["Conv_0"]["kernel"].sharding.spec == P(None, None, None, "data")
    chex.assert_trees_all_equal(jax.device_get(back.params), jax.device_get(s_fsdp.params))
    mngr.close()


@pytest.mark.slow  # two 3-step runs, over 20 s: CI's second job
def test_bfloat16_compute_is_finite_and_close_and_the_bound_stays_float32(tiny):
    import jax.numpy as jnp

    from diffusion import DDPM, make_schedule
    from models import make_model
    from training.step import make_rows_fn

    c32, c16 = tiny(**{"sampler.name": "uniform"}), tiny(**{"sampler.name": "uniform", "model.dtype": "bfloat16"})
    s32, m32 = run_steps(c32, 3)
    s16, m16 = run_steps(c16, 3)
    assert all(
        x.dtype == jnp.float32
        for x in jax.tree.leaves((s16.params, s16.opt_state, s16.ema_params))
        if jnp.issubdtype(x.dtype, jnp.floating)
    )
    assert np.isfinite(float(m16["loss"])) and float(m16["loss"]) == pytest.approx(float(m32["loss"]), rel=0.05)
    chex.assert_trees_all_close(jax.device_get(s16.params), jax.device_get(s32.params), atol=2e-2)
    # the bound terms (and the learned sampler's probes) run the same parameters in float32
    process = DDPM(make_schedule("linear", 1000))
    x0 = jnp.linspace(-1, 1, 2 * 64).reshape(2, 8, 8, 1)
    ts, noise = jnp.array([0, 500]), jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 1))
    params = jax.device_get(s16.params)
    terms = [jax.jit(make_rows_fn(make_model(c.model), process))(params, x0, ts, noise) for c in (c16, c32)]
    np.testing.assert_array_equal(np.asarray(terms[0]), np.asarray(terms[1]))


@pytest.mark.slow  # an 8-device compile, over 20 s: CI's second job
def test_compiled_step_shards_the_sweep_and_has_no_host_round_trips(tiny):
    """The 8-device adaptive step (a 200-timestep sweep, no chunking): every forward convolution runs on at most
    ceil(200 / 8) = 25 rows per device (the whole grid on every device before), and the step has no host callback,
    infeed or outfeed."""
    import re

    from training import aot
    from training.setup import build

    c = tiny(**{"sampler.adaptive.sweep_stride": 5, "sampler.adaptive.probe_chunk_rows": 0, "mesh.data": 8})
    compiled, _ = aot.compile_step(build(c))
    text = compiled.as_text()
    rows = [
        int(m.group(1))
        for m in re.finditer(r"= f32\[(\d+),\d+,\d+,\d+\]\{[\d,]+\} convolution\([^\n]*window=\{size=(?:3x3|1x1)", text)
    ]
    assert rows and max(rows) == 25, sorted(set(rows))
    for needle in ("infeed", "outfeed", "callback", "host_compute"):
        assert needle not in text.lower(), needle


def test_ema_warm_up_follows_its_closed_form(tiny):
    """train.ema_warmup: the EMA's decay at the n-th update is min(ema_decay, (1 + n) / (10 + n)) (2/11 at the first,
    LDM's and score_sde's form), in the step itself; without it ema_decay from the first update."""
    from training.state import ema_decay_at

    steps = (0, 88, 888, 8988, 10**6)
    for warmup in (True, False):
        decay_at = ema_decay_at(tiny(**{"train.ema_warmup": warmup}).train)
        expected = [min(0.999, (2 + s) / (11 + s)) if warmup else 0.999 for s in steps]
        np.testing.assert_allclose([float(decay_at(jnp.int32(s))) for s in steps], expected, rtol=1e-6)
    c = tiny(**{"train.ema_warmup": True, "sampler.name": "uniform"})
    setup = build(c)
    state = initial_state(setup)
    ema0 = jax.device_get(state.ema_params)  # the step donates the state's buffers
    new, _ = setup.step_for(0)(state, setup.example_batch(c.train.batch_size))
    d = 2 / 11  # against 0.999 without the warm-up
    hand = jax.tree.map(lambda e, p: d * e + (1 - d) * np.asarray(p), ema0, jax.device_get(new.params))
    chex.assert_trees_all_close(jax.device_get(new.ema_params), hand, rtol=1e-5, atol=1e-7)
