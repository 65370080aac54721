"""The dataset registry (config.data, flat layout) and the random-access source contract.

A dataset is a class with a `name`, optional own FIELDS, an optional `check(cfg, ctx)` and `load(cfg, split)`
returning a source of uint8 images [H, W, C]: `len(source)` and `source.get(indices) -> [N, H, W, C]`; a dataset
with `num_classes` > 0 has labels: `source.get_labelled(indices) -> (images, int32 labels [N])`, in
0..num_classes-1. A source may hold float arrays instead of images (pre-encoded latents, data/latents.py: its part
has dtype "float32"); it may then implement `get(indices, flip=mask)` itself (the flipped images' latents encoded
beforehand) with `flips_itself = True`, and `labels(indices)`.
Every dataset has the common fields below; nothing is downloaded at run time.
"""

import numpy as np

from config.fields import Bool, FieldError, Int, Path
from config.registry import FLAT, Registry
from core import fingerprint

COMMON = dict(
    data_dir=Path("", mutable=True),  # tensorflow-datasets folder for everything but the embedded digits
    # processes that read, decode and flip the batches (data/pipeline.py); 0: this process, on one prefetch thread
    workers=Int(0, 0, mutable=True),
    image_size=Int(8, 1),
    channels=Int(1, 1),
)

DATASETS = Registry("data", FLAT, common=COMMON)


class DatasetNotFound(RuntimeError):
    pass


class CorruptRecord(RuntimeError):
    """A record that cannot be read or decoded, named by dataset, split and index (the index in the split, as
    data/pipeline.py draws them)."""

    def __init__(self, dataset: str, split: str, index: int, why: str):
        super().__init__(f"config.data.name={dataset!r}, split {split!r}, record {index}: {why}")
        self.dataset, self.split, self.index, self.why = dataset, split, index, why

    def __reduce__(self):  # raised in a loader worker process, re-raised in the main one
        return CorruptRecord, (self.dataset, self.split, self.index, self.why)


def read_each(read, indices, dataset: str, split: str, what=lambda i: ""):
    """[read(i) for i in indices], a failing record raised as CorruptRecord naming it; `what(i)` adds where the
    record lives (a file)."""
    out = []
    for i in np.asarray(indices):
        try:
            out.append(read(int(i)))
        except Exception as e:
            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
            raise CorruptRecord(dataset, split, int(i), f"{what(int(i))}{why}") from None
    return out


class ArraySource:
    """In-memory images [N, H, W, C] and, for a labelled dataset, labels [N]."""

    def __init__(self, images, labels=None):
        self.images, self.labels_ = images, labels

    def __len__(self):
        return len(self.images)

    def get(self, indices):
        return self.images[np.asarray(indices)]

    def labels(self, indices):
        return np.asarray(self.labels_[np.asarray(indices)], np.int32)

    def get_labelled(self, indices):
        return self.get(indices), self.labels(indices)

    def fingerprint(self) -> str:
        return fingerprint.of_arrays(self.images, *(() if self.labels_ is None else (self.labels_,)))


def flip_fields(default: bool) -> dict:
    """A dataset's random_flip field: random horizontal flips of training images, each image of each step flipped
    with probability 1/2 as a pure function of (seed, step, position in the batch), so a resumed run flips the same
    images (data/pipeline.py)."""
    return dict(random_flip=Bool(default))


class Dataset:
    """Base of a registered dataset whose images have one size: `shape` (H, W, C) is checked against the config's
    image_size and channels, and gives their defaults."""

    name = "base"
    num_classes = 0  # class labels 0..num_classes-1 that load() sources give with labels=True; 0: none
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

    @classmethod
    def pixels(cls, cfg, split: str):
        """A source of the split's uint8 images (for FID's real images): the dataset itself, or for pre-encoded
        latents the images they were encoded from."""
        return cls.load(cfg, split)


def dataset_classes(data_cfg) -> int:
    """The class count of the dataset config.data names (0: it has no labels)."""
    if data_cfg.name not in DATASETS.names():
        return 0
    part = DATASETS[data_cfg.name]
    return part.classes(data_cfg) if hasattr(part, "classes") else getattr(part, "num_classes", 0)


def example_shape(data_cfg) -> tuple:
    """One example's shape: what the dataset part says (`example_shape(cfg)`: [seq_len] for text, data/text.py), else
    [H, W, C] of config.data's image_size and channels."""
    part = DATASETS.parts.get(data_cfg.name)
    if part is not None and hasattr(part, "example_shape"):
        return tuple(part.example_shape(data_cfg))
    return (data_cfg.image_size, data_cfg.image_size, data_cfg.channels)


def pixel_split(data_cfg, split: str):
    """A source of uint8 images of split 'train' or 'test' (Dataset.pixels)."""
    return DATASETS[data_cfg.name].pixels(data_cfg, split)


def load_split(data_cfg, split: str):
    """A source for split 'train' or 'test' of the dataset config.data names (pass config.data)."""
    return DATASETS[data_cfg.name].load(data_cfg, split)


def check_splits(data_cfg):
    """Opens the splits a run of config.data will read later, for a dataset part that names them
    (`check_splits(cfg)`: a text corpus's validation and test splits, data/text.py), so that one too short for
    its sequences ends in one line before anything compiles; nothing for the others."""
    part = DATASETS.parts.get(data_cfg.name)
    if part is not None and hasattr(part, "check_splits"):
        part.check_splits(data_cfg)


def split_fingerprint(source) -> str:
    """The content hash of a split's source (its arrays, labels included), or fingerprint.UNKNOWN for a source that
    reads records one by one (tensorflow-datasets, image folders: hashing them would cost a pass over the data)."""
    own = getattr(source, "fingerprint", None)
    return own() if own is not None else fingerprint.UNKNOWN


def data_fingerprints(data_cfg) -> dict:
    """{split: content hash} of the train and test splits of config.data (a split it lacks: absent)."""
    out = {}
    for split in ("train", "test"):
        try:
            source = load_split(data_cfg, split)
        except Exception:  # a dataset without this split (tfds' celeb_a_hq has no test split)
            continue
        out[split] = split_fingerprint(source)
    return out
