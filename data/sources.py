"""Image datasets as random-access sources of uint8 images [H, W, C].

- digits: scikit-learn's handwritten digits (8x8, 1,797 images, shipped inside scikit-learn, no network). Pixel values
  0..16 are mapped to 8-bit as round(v * 255 / 16). Fixed split: a permutation with numpy seed 0; the first 1,500
  images train, the remaining 297 test.
- Everything else is read through tensorflow-datasets' random-access `data_source` (array_record files) from
  config.data.data_dir. Nothing is downloaded at run time: a dataset that is not prepared there stops the run with the
  command that prepares it.
"""
import numpy as np

DIGITS_TRAIN = 1500

# name -> (tfds name, image key)
TFDS = {
    "cifar10": ("cifar10", "image"),
    "celeb_a_hq": ("celeb_a_hq/256", "image"),
    "imagenet32": ("downsampled_imagenet/32x32", "image"),
    "imagenet64": ("downsampled_imagenet/64x64", "image"),
    "digits_tfds": ("digits", "image"),  # the digits through a real tfds builder (data/digits_builder.py)
}
DATASETS = ("digits",) + tuple(TFDS)


class DatasetNotFound(RuntimeError):
    pass


def digits_arrays():
    """(train, test) uint8 arrays [N, 8, 8, 1] and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    perm = np.random.default_rng(0).permutation(len(images))
    images, labels = images[perm], d.target[perm].astype(np.int64)
    return (images[:DIGITS_TRAIN], labels[:DIGITS_TRAIN]), (images[DIGITS_TRAIN:], labels[DIGITS_TRAIN:])


class ArraySource:
    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def get(self, indices):
        return self.images[np.asarray(indices)]


class TfdsSource:
    """tfds random-access source; reads only the records asked for (each process its own shard)."""

    def __init__(self, name: str, split: str, data_dir: str):
        import tensorflow_datasets as tfds

        if name == "digits_tfds":
            from data import digits_builder  # noqa: F401  registers the builder
        tfds_name, self.key = TFDS[name]
        builder = tfds.builder(tfds_name, data_dir=data_dir or None)
        if not builder.is_prepared():
            raise DatasetNotFound(
                f"config.data.name={name!r}: no prepared tensorflow-datasets copy of {tfds_name!r} under "
                f"config.data.data_dir={data_dir!r}. On a machine with network run: "
                f"tfds build {tfds_name} --data_dir={data_dir or '~/tensorflow_datasets'} --file_format=array_record "
                f"(needs `pip install tensorflow`), then copy that folder here.")
        self.source = tfds.data_source(tfds_name, split=split, data_dir=data_dir or None)

    def __len__(self):
        return len(self.source)

    def get(self, indices):
        recs = self.source.__getitems__(list(map(int, indices))) if hasattr(self.source, "__getitems__") else [self.source[int(i)] for i in indices]
        return np.stack([np.asarray(r[self.key]) for r in recs]).astype(np.uint8)


def load_split(config, split: str):
    """A source for split 'train' or 'test' of config.data.name."""
    name = config.data.name
    if name == "digits":
        (tr, _), (te, _) = digits_arrays()
        return ArraySource(tr if split == "train" else te)
    if name not in DATASETS:
        raise ValueError(f"config.data.name={name!r} is not one of {', '.join(DATASETS)}")
    return TfdsSource(name, split, config.data.data_dir)
