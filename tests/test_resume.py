"""Exact resume for every sampler with state and every weighting: N steps in one go equal N/2, a real orbax
checkpoint, and N/2. antithetic, speed, lognormal and logitnormal keep no state of their own and draw from the step's
key as uniform does (resumed here); they are left out to keep the suite within its time budget."""

import chex
import jax
import numpy as np
import pytest

from conftest import full_and_resumed
from training.setup import initial_state

# each sampler with a weighting, so that every weighting is in some resumed run
WEIGHTING_OF = {
    "uniform": "min_snr",
    "loss_second_moment": "p2",
    "grad_variance": "speed",
    "adaptive": "none",
    "infonoise": "uncertainty",
}


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
    setup, full, resumed = full_and_resumed(c, tmp_path)
    assert int(resumed.step) == 6
    chex.assert_trees_all_equal(full, resumed)
    if sampler in ("loss_second_moment", "grad_variance", "adaptive", "infonoise"):  # a sampler state that moved
        init = jax.device_get(initial_state(setup).sampler_state)
        assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(init), jax.tree.leaves(full.sampler_state)))


def test_a_run_loading_with_worker_processes_resumes_mid_epoch_exactly(tiny, tmp_path):
    """Steps 0-2, an orbax checkpoint restored into a fresh state, then steps 3-5 from a new iterator, with the batches
    read and flipped in two Grain worker processes: the final state equals that of six steps in one go loading
    in-process, bit for bit (the order does not depend on the workers). 3 of the 94 steps of an epoch of the 1,500
    digits at batch 16: the restart is mid-epoch."""
    _, full, resumed = full_and_resumed(tiny(**{"data.random_flip": True}), tmp_path, resumed_workers=2)
    assert int(resumed.step) == 6 and len(jax.tree.leaves(full)) > 100
    chex.assert_trees_all_equal(full, resumed)
