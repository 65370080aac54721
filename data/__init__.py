"""Image datasets, registered by name (DATASETS), and the step-indexed batch pipeline."""

from data import digits, folder, latents, mnist, tfds
from data.base import (
    DATASETS,
    ArraySource,
    CorruptRecord,
    DatasetNotFound,
    data_fingerprints,
    dataset_classes,
    load_split,
    pixel_split,
)
from data.digits import digits_arrays
from data.mnist import mnist_arrays
from data.pipeline import BatchIterator, global_batch_indices

__all__ = [
    "DATASETS",
    "ArraySource",
    "DatasetNotFound",
    "CorruptRecord",
    "load_split",
    "pixel_split",
    "dataset_classes",
    "data_fingerprints",
    "digits_arrays",
    "mnist_arrays",
    "mnist",
    "latents",
    "folder",
    "global_batch_indices",
    "BatchIterator",
    "digits",
    "tfds",
]
