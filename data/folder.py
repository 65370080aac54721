"""Images from a folder (FFHQ, MetFaces, an ImageNet train/ tree, CelebA-HQ as PNGs): `config.data.name =
"folder"`. Nothing is downloaded; the files are read with random access, each process its own rows.

- `train_dir` / `test_dir`: folders searched recursively for .png / .jpg / .jpeg / .webp / .bmp files, in sorted
  path order (test_dir "": the train folder serves both splits, as for FFHQ whose FID reference is the training set).
- `class_folders`: labels from the first-level subfolder names, sorted (ImageNet's n01440764 ... -> 0 ... 999, as
  torchvision's ImageFolder and DiT's / U-ViT's loaders number them); num_classes is set by the config
  (`data.num_classes`, 1000 for ImageNet) and checked against the folders when they are read.
- Each image is converted to RGB (or L for channels = 1) and center-cropped to image_size as ADM does
  (openai/guided-diffusion image_datasets.center_crop_arr, which DiT, SiT and SpeeD use): halve with BOX filtering
  while the short side is at least twice the size, resize the short side to the size with BICUBIC, crop the centre.
"""

import os

import numpy as np

from config.fields import Bool, FieldError, Int, Path
from data.base import DATASETS, Dataset, DatasetNotFound, flip_fields, read_each

EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def center_crop_arr(image, size: int) -> np.ndarray:
    """ADM's center crop of a PIL image to size x size (see the module docstring)."""
    from PIL import Image

    while min(*image.size) >= 2 * size:
        image = image.resize(tuple(x // 2 for x in image.size), resample=Image.BOX)
    scale = size / min(*image.size)
    image = image.resize(tuple(round(x * scale) for x in image.size), resample=Image.BICUBIC)
    arr = np.array(image)
    y, x = (arr.shape[0] - size) // 2, (arr.shape[1] - size) // 2
    return arr[y : y + size, x : x + size]


def list_images(root: str):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.lower().endswith(EXTENSIONS)]
    return sorted(out)


class FolderSource:
    def __init__(self, root: str, size: int, channels: int, class_folders: bool, num_classes: int, split="train"):
        self.split = split
        root = os.path.expanduser(root)
        if not root or not os.path.isdir(root):
            raise DatasetNotFound(f"config.data.train_dir / test_dir={root!r}: no such folder of images")
        self.files = list_images(root)
        if not self.files:
            raise DatasetNotFound(f"{root!r} holds no {'/'.join(EXTENSIONS)} images")
        self.size, self.mode = size, "L" if channels == 1 else "RGB"
        self.classes = None
        if class_folders:
            names = sorted({os.path.relpath(f, root).split(os.sep)[0] for f in self.files})
            if len(names) != num_classes:
                raise DatasetNotFound(
                    f"{root!r} has {len(names)} class folders; config.data.num_classes is {num_classes}"
                )
            index = {n: i for i, n in enumerate(names)}
            self.classes = np.array([index[os.path.relpath(f, root).split(os.sep)[0]] for f in self.files], np.int32)

    def __len__(self):
        return len(self.files)

    def read(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.files[i]) as im:
            a = center_crop_arr(im.convert(self.mode), self.size)
        return a[..., None] if a.ndim == 2 else a

    def get(self, indices):
        where = lambda i: f"{self.files[i]}: "
        return np.stack(read_each(self.read, indices, "folder", self.split, where)).astype(np.uint8)

    def get_labelled(self, indices):
        return self.get(indices), self.classes[np.asarray(indices)]


@DATASETS.register
class Folder(Dataset):
    """Images in a folder (module docstring)."""

    name = "folder"
    shape = None
    FIELDS = dict(
        train_dir=Path("", mutable=True),
        test_dir=Path("", mutable=True),
        class_folders=Bool(False),
        num_classes=Int(0, 0),
        **flip_fields(True),  # FFHQ, ImageNet (DiT, U-ViT, SpeeD) are trained with random flips
    )
    COMMON_DEFAULTS = dict(image_size=256, channels=3)

    @classmethod
    def check(cls, cfg, ctx):
        if cfg.channels not in (1, 3):
            raise FieldError("channels", cfg.channels, "images are read as 1 (L) or 3 (RGB) channels")
        if cfg.class_folders and cfg.num_classes < 1:
            raise FieldError("num_classes", cfg.num_classes, "must be the number of class folders (class_folders=True)")

    @classmethod
    def classes(cls, cfg) -> int:
        return cfg.num_classes if cfg.class_folders else 0

    @classmethod
    def load(cls, cfg, split):
        root = cfg.test_dir if split == "test" and cfg.test_dir else cfg.train_dir
        return FolderSource(root, cfg.image_size, cfg.channels, cfg.class_folders, cfg.num_classes, split)
