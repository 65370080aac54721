import numpy as np
import pytest

from data import DatasetNotFound, digits_arrays, global_batch_indices, load_split


def test_digits_split_is_fixed_and_8bit():
    (tr, trl), (te, tel) = digits_arrays()
    assert tr.shape == (1500, 8, 8, 1) and te.shape == (297, 8, 8, 1)
    assert tr.dtype == np.uint8 and tr.max() == 255 and tr.min() == 0
    (tr2, _), _ = digits_arrays()
    np.testing.assert_array_equal(tr, tr2)
    # sklearn's pixel values 0..16 map to round(v * 255 / 16)
    assert set(np.unique(tr)) <= {round(v * 255 / 16) for v in range(17)}


def test_batches_walk_through_epoch_permutations():
    n, B = 10, 4
    stream = np.concatenate([global_batch_indices(0, s, B, n) for s in range(5)])  # 20 = 2 epochs
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:]) == list(range(10))
    assert not np.array_equal(stream[:10], stream[10:])
    np.testing.assert_array_equal(global_batch_indices(0, 3, B, n), stream[12:16])
    assert not np.array_equal(global_batch_indices(1, 0, B, n), global_batch_indices(0, 0, B, n))


def test_tfds_builder_path_serves_the_same_images(tmp_path, tiny):
    from data.digits_builder import prepare

    prepare(str(tmp_path))
    c = tiny(**{"data.name": "digits_tfds", "data.data_dir": str(tmp_path)})
    src, ref = load_split(c.data, "test"), load_split(tiny().data, "test")
    assert len(src) == len(ref) == 297
    idx = np.arange(297)
    key = lambda a: sorted(im.tobytes() for im in a)  # tfds shuffles records by key hash when it prepares
    assert key(src.get(idx)) == key(ref.get(idx))
    assert src.get(np.array([3, 3])).shape == (2, 8, 8, 1)


def test_missing_dataset_says_how_to_get_it(tmp_path, tiny):
    c = tiny(**{"data.name": "cifar10", "data.data_dir": str(tmp_path), "data.image_size": 32, "data.channels": 3})
    with pytest.raises(DatasetNotFound, match=r"config.data.name='cifar10'.*tfds build cifar10"):
        load_split(c.data, "train")


def test_random_flips_are_a_pure_function_of_seed_and_step_and_resume_exactly(tiny):
    import jax

    from data import DATASETS, BatchIterator
    from data.pipeline import flip_mask
    from training.mesh import batch_sharding, make_mesh

    c = tiny(**{"data.random_flip": True})
    src = load_split(c.data, "train")
    sharding = batch_sharding(make_mesh(c.mesh))

    def batches(start, n, flip=True):
        it = BatchIterator(src, c.seed, 16, sharding, start_step=start, random_flip=flip)
        try:
            return [np.asarray(jax.device_get(next(it)[1])) for _ in range(n)]
        finally:
            it.close()

    flipped, plain, resumed = batches(0, 4), batches(0, 4, flip=False), batches(2, 2)
    for s in range(4):
        mask = flip_mask(c.seed, s, 16)
        assert 0 < mask.sum() < 16
        np.testing.assert_array_equal(flipped[s][mask], plain[s][mask][:, :, ::-1])  # mirrored left-right
        np.testing.assert_array_equal(flipped[s][~mask], plain[s][~mask])
    np.testing.assert_array_equal(np.stack(resumed), np.stack(flipped[2:]))  # a resumed run flips the same images
    assert not np.array_equal(flip_mask(c.seed, 0, 16), flip_mask(c.seed, 1, 16))
    # per-dataset defaults: the datasets DDPM flips, and not the digits
    assert [DATASETS.default_config(n).random_flip for n in ("digits", "cifar10", "celeb_a_hq", "imagenet64")] == [
        False,
        True,
        True,
        False,
    ]
    assert (DATASETS.default_config("cifar10").image_size, DATASETS.default_config("cifar10").channels) == (32, 3)


def test_the_epoch_order_is_todays_formula_with_each_permutation_computed_once(monkeypatch):
    """The order is default_rng([seed, e]).permutation(N) epoch after epoch (the loader before Grain, bit for bit);
    a run of steps draws each epoch's permutation once, not once per step."""
    from data.pipeline import EpochOrder

    n, B, seed = 10, 4, 3
    want = np.concatenate([np.random.default_rng([seed, e]).permutation(n) for e in range(3)])
    calls = []
    real = np.random.default_rng
    monkeypatch.setattr(np.random, "default_rng", lambda s: calls.append(tuple(s)) or real(s))
    order = EpochOrder(seed, n)
    got = np.concatenate([order.batch(s, B) for s in range(7)])  # 28 positions: epochs 0, 1, 2
    np.testing.assert_array_equal(got, want[:28])
    assert calls == [(seed, 0), (seed, 1), (seed, 2)]
