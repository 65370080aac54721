"""Datasets, registered by name (DATASETS): images, latents and character text; and the step-indexed batch pipeline."""

from data import digits, folder, latents, mnist, text, tfds
from data.base import DATASETS, ArraySource, CorruptRecord, DatasetNotFound, dataset_classes, load_split, pixel_split
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
    "digits_arrays",
    "mnist_arrays",
    "mnist",
    "latents",
    "folder",
    "global_batch_indices",
    "BatchIterator",
    "digits",
    "tfds",
    "text",
]
