"""Datasets, registered by name (DATASETS): images, latents and character text (every module of this package that
registers one is imported: config.registry.import_parts); and the step-indexed batch pipeline."""

from config.registry import import_parts
from data.base import (
    DATASETS,
    ArraySource,
    CorruptRecord,
    DatasetNotFound,
    check_splits,
    data_fingerprints,
    dataset_classes,
    load_split,
    pixel_split,
)
from data.digits import digits_arrays
from data.mnist import mnist_arrays
from data.pipeline import BatchIterator, global_batch_indices

import_parts(__name__, __path__)

__all__ = [
    "DATASETS",
    "ArraySource",
    "DatasetNotFound",
    "check_splits",
    "CorruptRecord",
    "load_split",
    "pixel_split",
    "dataset_classes",
    "data_fingerprints",
    "digits_arrays",
    "mnist_arrays",
    "global_batch_indices",
    "BatchIterator",
]
