"""Image datasets, registered by name (DATASETS), and the step-indexed batch pipeline."""

from data import digits, tfds
from data.base import DATASETS, ArraySource, DatasetNotFound, load_split
from data.digits import digits_arrays
from data.pipeline import BatchIterator, global_batch_indices

__all__ = [
    "DATASETS",
    "ArraySource",
    "DatasetNotFound",
    "load_split",
    "digits_arrays",
    "global_batch_indices",
    "BatchIterator",
    "digits",
    "tfds",
]
