"""The embedded digits: scikit-learn's handwritten digits (8x8, 1,797 images, shipped inside scikit-learn, no
network). Pixel values 0..16 are mapped to 8-bit as round(v * 255 / 16). Fixed split: a permutation with numpy
seed 0; the first 1,500 images train, the remaining 297 test."""

import numpy as np

from data.base import DATASETS, ArraySource, Dataset, flip_fields

DIGITS_TRAIN = 1500


def digits_arrays():
    """(train, test) uint8 arrays [N, 8, 8, 1] and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    perm = np.random.default_rng(0).permutation(len(images))
    images, labels = images[perm], d.target[perm].astype(np.int64)
    return (images[:DIGITS_TRAIN], labels[:DIGITS_TRAIN]), (images[DIGITS_TRAIN:], labels[DIGITS_TRAIN:])


@DATASETS.register
class Digits(Dataset):
    name = "digits"
    shape = (8, 8, 1)
    num_classes = 10
    FIELDS = flip_fields(False)  # digits are not mirror-symmetric
    COMMON_DEFAULTS = dict(image_size=8, channels=1)

    @classmethod
    def describe(cls):
        return "embedded digits"

    @classmethod
    def load(cls, cfg, split):
        train, test = digits_arrays()
        return ArraySource(*(train if split == "train" else test))
