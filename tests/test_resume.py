"""Exact resume for every sampler with state and every weighting: N steps in one go equal N/2, a real orbax
checkpoint, and N/2. antithetic, speed, lognormal and logitnormal keep no state of their own and draw from the step's
key as uniform does (resumed here); they are left out to keep the suite within its time budget."""

import io
import os
from contextlib import redirect_stdout

import chex
import jax
import numpy as np
import pytest

from conftest import full_and_resumed, tiny_config
from training.setup import initial_state

# each sampler with a weighting, so that every weighting is in some resumed run
WEIGHTING_OF = {
    "uniform": "min_snr",
    "loss_second_moment": "p2",
    "grad_variance": "speed",
    "adaptive": "none",
    "infonoise": "uncertainty",
}


# over 20 s (the two programs of the first two) or near it (the last two): CI's second job
SLOW = ("grad_variance", "adaptive", "infonoise", "loss_second_moment")


@pytest.mark.parametrize(
    "sampler", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s for s in sorted(WEIGHTING_OF)]
)
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


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_a_run_loading_with_worker_processes_resumes_mid_epoch_exactly(tiny, tmp_path):
    """Steps 0-2, an orbax checkpoint restored into a fresh state, then steps 3-5 from a new iterator, with the batches
    read and flipped in two Grain worker processes: the final state equals that of six steps in one go loading
    in-process, bit for bit (the order does not depend on the workers). 3 of the 94 steps of an epoch of the 1,500
    digits at batch 16: the restart is mid-epoch."""
    _, full, resumed = full_and_resumed(tiny(**{"data.random_flip": True}), tmp_path, resumed_workers=2)
    assert int(resumed.step) == 6 and len(jax.tree.leaves(full)) > 100
    chex.assert_trees_all_equal(full, resumed)


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_a_checkpoint_of_the_learned_samplers_dict_state_resumes(tmp_path):
    """tests/fixtures/legacy_adaptive: a 2-step run's workdir written at commit e8186ea, when the learned sampler's
    state was a dict with keys S, X, y, count (make_legacy_adaptive_checkpoint.py). Today's code restores it into
    PolicyState, every array equal to the stored one under its old name, and main.py's code path resumes it to step 4,
    whose checkpoint has the named layout."""
    import shutil

    from fixtures.make_legacy_adaptive_checkpoint import OVERRIDES

    from conftest import restore_checkpoint
    from samplers.policy_state import PolicyState
    from training import checkpoint as ckpt
    from training.setup import build

    wd = tmp_path / "legacy"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "fixtures", "legacy_adaptive"), wd)
    _, stored = restore_checkpoint(wd, 2)  # by its own metadata: the old keys
    assert {"S", "X", "y", "count"} <= set(stored["sampler_state"])
    c = tiny_config(**OVERRIDES)
    setup = build(c)
    mngr = ckpt.make_manager(c, str(wd))
    abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
    state = jax.device_get(ckpt.restore(mngr, 2, abstract, str(wd)))
    mngr.close()
    assert isinstance(state.sampler_state, PolicyState) and int(state.step) == 2
    for name, old in PolicyState.LEGACY_NAMES.items():
        np.testing.assert_array_equal(getattr(state.sampler_state, name), stored["sampler_state"][old])
    chex.assert_trees_all_equal(state.sampler_state.policy, stored["sampler_state"]["policy"])
    chex.assert_trees_all_equal(state.params, stored["params"])

    import main  # its code path in-process, as the command would run it

    out = io.StringIO()
    with redirect_stdout(out):
        assert main.run(tiny_config(**{**OVERRIDES, "train.num_steps": 4}), str(wd), "train") == 0
    assert "Resuming from checkpoint step 2" in out.getvalue()
    step, new = restore_checkpoint(wd)
    assert step == 4 and {"probe_times", "sweep_rows"} <= set(new["sampler_state"]) and "X" not in new["sampler_state"]
    assert int(new["sampler_state"]["updates"]) == 2  # the policy updated at steps 0 and 2
