"""Class labels, label dropout, classifier-free guidance and the conditional bound."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.fields import ConfigError
from config.validate import validate
from data import BatchIterator, digits_arrays, load_split, mnist_arrays
from diffusion.generate import generate, guided_apply, sample_labels, sampling_fn
from evaluation.bound import bound_fn
from training.setup import build, initial_state
from training.step import drop_labels, make_apply

COND = {"model.class_cond": True, "model.label_dropout": 0.2}


def perturbed(setup, seed=1):
    """Initial parameters with every leaf moved off its init (zero-initialised layers included), so that labels
    and guidance change the output."""
    state = initial_state(setup)
    leaves, tree = jax.tree.flatten(state.ema_params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree.unflatten(tree, [a + 0.05 * jax.random.normal(k, a.shape) for a, k in zip(leaves, keys)])


def test_datasets_yield_their_labels_and_mnist_has_a_fixed_stratified_split(tiny):
    (xtr, ytr), (xte, yte) = mnist_arrays()
    assert xtr.shape == (4000, 28, 28, 1) and xte.shape == (1000, 28, 28, 1) and xtr.dtype == np.uint8
    assert np.bincount(ytr).tolist() == [400] * 10 and np.bincount(yte).tolist() == [100] * 10
    assert not (set(map(bytes, xtr[:200])) & set(map(bytes, xte)))  # the splits do not share images
    c = tiny(**COND)
    src = load_split(c.data, "train")
    (images, labels) = digits_arrays()[0]
    setup = build(c)
    it = BatchIterator(src, c.seed, c.train.batch_size, setup.batch_sharding, labels=True)
    _, batch = next(it)
    it.close()
    x, y = np.asarray(batch["image"]), np.asarray(batch["label"])
    # each label is the one of its own image
    index = {bytes(im): int(lb) for im, lb in zip(images, labels)}
    assert [index[bytes(im)] for im in x] == y.tolist() and y.dtype == np.int32


def test_label_dropout_replaces_labels_by_the_null_class_at_its_rate():
    y = jnp.arange(20000) % 10
    dropped = np.asarray(drop_labels(jax.random.PRNGKey(0), y, 10, 0.1))
    changed = dropped != np.asarray(y)
    assert set(dropped[changed].tolist()) == {10}
    assert abs(changed.mean() - 0.1) < 0.01
    assert drop_labels(jax.random.PRNGKey(0), y, 10, 0.0) is y


def test_guidance_scale_one_is_conditional_sampling_exactly_and_zero_is_unconditional(tiny):
    c = tiny(**COND, **{"sample.num": 8})
    setup = build(c)
    params = perturbed(setup)
    key = jax.random.PRNGKey(3)
    shape = setup.batch_shape(8)
    y = jnp.asarray(sample_labels(10, 8))
    apply = make_apply(setup.model)

    def direct(labels):
        fn = lambda p, k: setup.process.sample(lambda x, t: apply(p, x, t, None, labels), k, shape, "ddim", 5)
        return jax.jit(fn)(params, key)

    cond, uncond = direct(y), direct(jnp.full_like(y, 10))
    to_u8 = lambda x: np.asarray(jnp.round((x + 1.0) * 127.5).clip(0, 255).astype(jnp.uint8))
    g1 = np.asarray(sampling_fn(setup, "ddim", 5, shape, 1.0)(params, key, y))
    g0 = np.asarray(sampling_fn(setup, "ddim", 5, shape, 0.0)(params, key, y))
    np.testing.assert_array_equal(g1, to_u8(cond))
    np.testing.assert_array_equal(g0, to_u8(uncond))
    g3 = np.asarray(sampling_fn(setup, "ddim", 5, shape, 3.0)(params, key, y))
    assert not np.array_equal(g3, g1)


def test_a_guided_network_output_is_uncond_plus_scale_times_the_difference(tiny):
    c = tiny(**COND, **{"diffusion.variance": "learned_range"})
    setup = build(c)
    params = perturbed(setup)
    apply = make_apply(setup.model)
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 8, 1))
    t = jnp.array([0, 10, 500, 999])
    y = jnp.array([1, 2, 3, 9])
    out = guided_apply(apply, setup.process, params, y, 2.5, 10)(x, t)
    cond, uncond = apply(params, x, t, None, y), apply(params, x, t, None, jnp.full_like(y, 10))
    assert out.shape == (4, 8, 8, 2)  # mean and learned-variance channels
    np.testing.assert_allclose(out[..., :1], uncond[..., :1] + 2.5 * (cond[..., :1] - uncond[..., :1]), atol=1e-5)
    # the variance is the conditional one's (a batch of 8 rows vs 4: float rounding of the convolutions only)
    np.testing.assert_allclose(out[..., 1:], cond[..., 1:], atol=1e-6)
    assert np.abs(np.asarray(out[..., 1:] - uncond[..., 1:])).max() > 1e-3


def test_grids_and_fid_draw_balanced_classes(tiny):
    assert sample_labels(0, 5) is None
    assert sample_labels(10, 12).tolist() == list(range(10)) + [0, 1]
    assert sample_labels(10, 3, offset=9).tolist() == [9, 0, 1]
    c = tiny(**COND, **{"sample.guidance_scale": 2.0})
    setup = build(c)
    images = generate(setup, perturbed(setup), jax.random.PRNGKey(0), 5)
    assert images.shape == (5, 8, 8, 1) and images.dtype == np.uint8


def test_the_conditional_bound_gives_each_image_its_own_label(tiny):
    """The bound folds timesteps into rows batch-major; each row must see its own image's label. With labels
    y_i, image i's bound equals image i's bound in a run where every image has label y_i (the same noise: the
    same key and shapes)."""
    c = tiny(**COND, **{"sampler.name": "uniform", "diffusion.num_timesteps": 100})
    setup = build(c)
    params = perturbed(setup)
    fn = bound_fn(setup)
    x = jnp.asarray(load_split(c.data, "test").get(np.arange(8)))
    y = np.array([3, 7, 7, 3, 3, 7, 3, 7], np.int32)
    key = jax.random.PRNGKey(0)
    mixed = np.asarray(fn(params, x, key, jnp.asarray(y)))
    for label in (3, 7):
        same = np.asarray(fn(params, x, key, jnp.full((8,), label, jnp.int32)))
        np.testing.assert_allclose(mixed[y == label], same[y == label], rtol=1e-6)
    other = np.asarray(fn(params, x, key, jnp.asarray((y + 1) % 10)))
    assert np.all(np.abs(other - mixed) > 0)  # every image's label enters its bound


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_conditional_training_agrees_across_device_counts(tiny):
    """A class-conditional run with label dropout, learned variances and the learned sampler's update: 8 devices
    and 1 give the same state."""
    results = []
    for devices in (8, 1):
        over = {"diffusion.variance": "learned_range", "mesh.data": devices, "sampler.adaptive.update_every": 1}
        c = tiny(**COND, **over)
        setup = build(c)
        src = load_split(c.data, "train")
        it = BatchIterator(src, c.seed, c.train.batch_size, setup.batch_sharding, labels=True)
        state = initial_state(setup)
        for step in range(2):
            state, metrics = setup.step_for(step)(state, next(it)[1])
        it.close()
        assert np.isfinite(float(metrics["loss"]))
        results.append(jax.device_get(state))
    chex.assert_trees_all_close(results[0].params, results[1].params, atol=2e-5, rtol=2e-4)
    chex.assert_trees_all_close(results[0].sampler_state, results[1].sampler_state, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sample.guidance_scale": 2.0}, "config.sample.guidance_scale=2.0 is not allowed: classifier-free guidance"),
        (
            {**COND, "model.label_dropout": 0.0, "eval.fid.guidance_scale": 1.5},
            "config.eval.fid.guidance_scale=1.5 is not allowed: the null class is never trained",
        ),
        (
            {**COND, "data.name": "celeb_a_hq", "data.image_size": 256, "data.channels": 3},
            "config.model.class_cond=True is not allowed: the dataset (celeb_a_hq) has no class labels",
        ),
    ],
)
def test_guidance_and_conditioning_errors_name_the_field(tiny, overrides, message):
    c = tiny(**overrides)
    with pytest.raises(ConfigError) as e:
        validate(c)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
