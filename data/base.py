"""The dataset registry (config.data, flat layout) and the random-access source contract.

A dataset is a class with a `name`, optional own FIELDS, an optional `check(cfg, ctx)` and `load(cfg, split)`
returning a source of uint8 images [H, W, C]: `len(source)` and `source.get(indices) -> [N, H, W, C]`.
Every dataset has the common fields below; nothing is downloaded at run time.
"""

import numpy as np

from core.fields import Bool, FieldError, Int, Path
from core.registry import FLAT, Registry

COMMON = dict(
    data_dir=Path("", mutable=True),  # tensorflow-datasets folder for everything but the embedded digits
    image_size=Int(8, 1),
    channels=Int(1, allowed=(1, 3)),
)

DATASETS = Registry("data", FLAT, common=COMMON)


class DatasetNotFound(RuntimeError):
    pass


class ArraySource:
    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def get(self, indices):
        return self.images[np.asarray(indices)]


def flip_fields(default: bool) -> dict:
    """A dataset's random_flip field: random horizontal flips of training images, each image of each step flipped
    with probability 1/2 as a pure function of (seed, step, position in the batch), so a resumed run flips the same
    images (data/pipeline.py)."""
    return dict(random_flip=Bool(default))


class Dataset:
    """Base of a registered dataset whose images have one size: `shape` (H, W, C) is checked against the config's
    image_size and channels, and gives their defaults."""

    name = "base"
    shape = None  # (H, W, C) of the dataset's images, or None when any size is possible
    FIELDS = flip_fields(False)
    COMMON_DEFAULTS = {}

    @classmethod
    def check(cls, cfg, ctx):
        if cls.shape is None:
            return
        h, w, c = cls.shape
        if cfg.image_size != h:
            raise FieldError("image_size", cfg.image_size, f"the {cls.describe()} are {h}x{w}")
        if cfg.channels != c:
            raise FieldError("channels", cfg.channels, f"the {cls.describe()} have {c} channel{'s' if c > 1 else ''}")

    @classmethod
    def describe(cls) -> str:
        return f"{cls.name} images"

    @classmethod
    def load(cls, cfg, split: str):
        raise NotImplementedError


def load_split(data_cfg, split: str):
    """A source for split 'train' or 'test' of the dataset config.data names (pass config.data)."""
    return DATASETS[data_cfg.name].load(data_cfg, split)
