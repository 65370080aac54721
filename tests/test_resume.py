"""Exact resume for every sampler with state and every weighting: N steps in one go equal N/2, a real orbax
checkpoint, and N/2. antithetic, speed, lognormal and logitnormal keep no state of their own and draw from the step's
key as uniform does (resumed here); they are left out to keep the suite within its time budget."""

import chex
import jax
import numpy as np
import pytest

from data import load_split
from data.pipeline import BatchIterator
from training import checkpoint as ckpt
from training.setup import build, initial_state

# each sampler with a weighting, so that every weighting is in some resumed run
WEIGHTING_OF = {"uniform": "min_snr", "loss_second_moment": "p2", "grad_variance": "speed", "adaptive": "none"}


@pytest.mark.parametrize("sampler", sorted(WEIGHTING_OF))
def test_resume_equals_uninterrupted_for_every_sampler(tiny, tmp_path, sampler):
    """6 steps in one go equal 3 steps, an orbax checkpoint restored into a fresh state, and 3 more: bit for bit,
    sampler state and data order included."""
    c = tiny(
        **{
            "sampler.name": sampler,
            "weighting.name": WEIGHTING_OF[sampler],
            "weighting.speed.tau": 500,
            "sampler.grad_variance.num_bins": 4,
            "sampler.grad_variance.update_every": 2,
            "data.random_flip": sampler == "uniform",  # flips resume too (a pure function of seed and step)
        }
    )
    setup = build(c)
    src = load_split(c.data, "train")

    def run(state, start, stop):
        it = BatchIterator(
            src, c.seed, c.train.batch_size, setup.batch_sharding, start_step=start, random_flip=c.data.random_flip
        )
        try:
            for step in range(start, stop):  # the programs the training loop runs (Setup.step_for)
                state, _ = setup.step_for(step)(state, next(it)[1])
        finally:
            it.close()
        return state

    mngr = ckpt.make_manager(c, str(tmp_path))
    half = run(initial_state(setup), 0, 3)
    ckpt.save(mngr, 3, half)
    full = jax.device_get(run(half, 3, 6))  # the same state goes on, uninterrupted
    mngr.close()
    mngr = ckpt.make_manager(c, str(tmp_path))  # a fresh manager, as a new process would have
    restored = ckpt.restore(
        mngr, mngr.latest_step(), ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings), ""
    )
    resumed = jax.device_get(run(restored, 3, 6))
    assert int(resumed.step) == 6
    chex.assert_trees_all_equal(full, resumed)
    if sampler in ("loss_second_moment", "grad_variance", "adaptive"):  # a sampler state that moved
        init = jax.device_get(initial_state(setup).sampler_state)
        assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(init), jax.tree.leaves(full.sampler_state)))
