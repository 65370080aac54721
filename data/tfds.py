"""Datasets read through tensorflow-datasets' random-access `data_source` (array_record files) from
config.data.data_dir. Nothing is downloaded at run time: a dataset that is not prepared there stops the run with the
command that prepares it."""

import numpy as np

from data.base import DATASETS, Dataset, DatasetNotFound, flip_fields, read_each


class TfdsSource:
    """tfds random-access source; reads only the records asked for (each process its own shard)."""

    def __init__(self, name: str, tfds_name: str, key: str, split: str, data_dir: str, label_key="", shape=None):
        import tensorflow_datasets as tfds

        self.args = (name, tfds_name, key, split, data_dir, label_key, shape)  # to open it again in a loader worker
        self.name, self.split, self.shape = name, split, tuple(shape) if shape else None

        if name == "digits_tfds":
            from data import digits_builder  # noqa: F401  registers the builder
        self.key, self.label_key = key, label_key
        builder = tfds.builder(tfds_name, data_dir=data_dir or None)
        if not builder.is_prepared():
            raise DatasetNotFound(
                f"config.data.name={name!r}: no prepared tensorflow-datasets copy of {tfds_name!r} under "
                f"config.data.data_dir={data_dir!r}. On a machine with network run: "
                f"tfds build {tfds_name} --data_dir={data_dir or '~/tensorflow_datasets'} --file_format=array_record "
                f"(needs `pip install tensorflow`), then copy that folder here."
            )
        self.source = tfds.data_source(tfds_name, split=split, data_dir=data_dir or None)

    def __reduce__(self):
        return TfdsSource, self.args

    def __len__(self):
        return len(self.source)

    def _records(self, indices):
        """The decoded records; a corrupt one (a damaged array_record chunk, a record that does not decode) is
        CorruptRecord naming its index, found by reading the records one by one once the batched read failed."""
        try:
            if hasattr(self.source, "__getitems__"):
                records = self.source.__getitems__(list(map(int, indices)))
            else:
                records = [self.source[int(i)] for i in indices]
            return [self._check(r) for r in records]
        except Exception:
            return read_each(lambda i: self._check(self.source[i]), indices, self.name, self.split)

    def _check(self, record):
        image = np.asarray(record[self.key])
        if self.shape is not None and image.shape != self.shape:
            raise ValueError(f"its {self.key!r} has shape {image.shape}, the dataset's images are {self.shape}")
        return record

    def get(self, indices):
        return np.stack([np.asarray(r[self.key]) for r in self._records(indices)]).astype(np.uint8)

    def get_labelled(self, indices):
        records = self._records(indices)
        images = np.stack([np.asarray(r[self.key]) for r in records]).astype(np.uint8)
        return images, np.asarray([int(r[self.label_key]) for r in records], np.int32)


class TfdsDataset(Dataset):
    tfds_name, image_key, label_key = "", "image", ""

    @classmethod
    def load(cls, cfg, split):
        return TfdsSource(cls.name, cls.tfds_name, cls.image_key, split, cfg.data_dir, cls.label_key, cls.shape)


def tfds_dataset(name: str, tfds_name: str, shape, flip: bool, num_classes: int = 0, label_key: str = "label"):
    """Register a tfds dataset whose images have `shape` (H, W, C), flipped in training by default when `flip`;
    with num_classes > 0 its records' `label_key` holds the class."""
    attrs = dict(
        name=name,
        tfds_name=tfds_name,
        shape=shape,
        num_classes=num_classes,
        label_key=label_key if num_classes else "",
        FIELDS=flip_fields(flip),
        COMMON_DEFAULTS=dict(image_size=shape[0], channels=shape[2]),
        __doc__=f"tensorflow-datasets' {tfds_name}",
    )
    return DATASETS.register(type(f"Tfds_{name}", (TfdsDataset,), attrs))


# Random horizontal flips as the papers trained: DDPM (and the learned sampler's reference code) flip CIFAR-10 and
# CelebA-HQ; improved-diffusion's ImageNet 32/64 loader does not flip; the digits are not mirror-symmetric.
tfds_dataset("cifar10", "cifar10", (32, 32, 3), flip=True, num_classes=10)
tfds_dataset("celeb_a_hq", "celeb_a_hq/256", (256, 256, 3), flip=True)
tfds_dataset("imagenet32", "downsampled_imagenet/32x32", (32, 32, 3), flip=False)
tfds_dataset("imagenet64", "downsampled_imagenet/64x64", (64, 64, 3), flip=False)
tfds_dataset(
    "digits_tfds", "digits", (8, 8, 1), flip=False, num_classes=10
)  # the digits through a real tfds builder (digits_builder.py)
