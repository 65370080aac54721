from data.sources import DATASETS, load_split, DatasetNotFound
from data.pipeline import global_batch_indices, BatchIterator

__all__ = ["DATASETS", "load_split", "DatasetNotFound", "global_batch_indices", "BatchIterator"]
