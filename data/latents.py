"""Pre-encoded latents of an image dataset (latent diffusion): `config.data.name = "latents"`,
`config.data.path` = the folder that `python -m data.encode_latents` wrote.

The folder holds, per split, `<split>.npy` (float32 latents [N, h, w, c], already multiplied by the autoencoder's
scaling factor), `<split>_labels.npy` (int32, for a labelled dataset), for a dataset trained with flips
`<split>_flipped.npy` (the latents of the mirrored images; a latent's mirror is not the mirrored image's latent), and
`meta.json` (the source dataset's config, the autoencoder, the latent shape, the class count, and per split the
content hash of its arrays: latents encoded again on another machine differ in their last bits). Arrays are read with
numpy memory maps: each process reads only the rows of its own slice of every batch.

Training draws `data.random_flip` per image as for pixels (data/pipeline.py: a pure function of seed, step and
position) and takes the flipped copy's latent. Samples, grids and FID decode through the autoencoder
(`data.autoencoder`, default: the one meta.json names); the bound is in latent space and labelled so.
"""

import contextlib
import json
import os
import tempfile

import numpy as np

from config.fields import FieldError, Int, Path
from core import fingerprint
from data.base import DATASETS, Dataset, DatasetNotFound, flip_fields

META = "meta.json"
HASH_AT_START_BYTES = 1 << 30  # latents without a stored hash hashed at a run's start up to this size (about 2 s)


def read_meta(path: str) -> dict:
    """meta.json of a latents folder; FieldError naming data.path when it is missing or incomplete."""
    file = os.path.join(path, META)
    if not path or not os.path.isfile(file):
        raise FieldError(
            "path",
            path,
            "a folder written by `python -m data.encode_latents --config=... --output=FOLDER` (no meta.json there)",
        )
    with open(file) as f:
        meta = json.load(f)
    unfinished = [s for s, info in meta["splits"].items() if not info.get("complete")]
    if unfinished:
        raise FieldError(
            "path", path, f"split(s) {unfinished} not completely encoded: run the same encode_latents command again"
        )
    return meta


def planned_meta(cfg) -> dict:
    """The meta.json of the latents `cfg` (config.data) describes, before they are encoded: image_size x image_size x
    channels, num_classes classes (0 when -1), flipped copies as random_flip asks. --mode=compile uses it to compile
    the step before `python -m data.encode_latents` has run; no rows."""
    splits = {s: dict(rows=0, done=0, complete=True) for s in ("train", "test")}
    return dict(
        source=dict(name="planned"),
        autoencoder=cfg.autoencoder or "embedded:planned",  # loaded only to decode samples: never by a compile
        kind="planned",
        latent_shape=[cfg.image_size, cfg.image_size, cfg.channels],
        num_classes=max(cfg.num_classes, 0),
        flipped=bool(cfg.random_flip),
        splits=splits,
    )


@contextlib.contextmanager
def planned_latents(config):
    """(config, note): for a latent config whose latents are not encoded yet (no meta.json at config.data.path), a
    copy of it reading a temporary folder that holds planned_meta, and a one-line note of what was assumed; else
    (config, ""). For --mode=compile, which reads no data."""
    d = config.data
    if d.name != "latents" or os.path.isfile(os.path.join(os.path.expanduser(d.path), META)):
        yield config, ""
        return
    meta = planned_meta(d)
    h, w, ch = meta["latent_shape"]
    note = (
        f"assumed: no latents at config.data.path={d.path!r} yet (no meta.json), so the step is compiled for "
        f"{h}x{w}x{ch} float32 latents (config.data.image_size, config.data.channels) with {meta['num_classes']} "
        f"classes (config.data.num_classes), batch [{config.train.batch_size}, {h}, {w}, {ch}]"
    )
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, META), "w") as f:
            json.dump(meta, f)
        c = config.copy_and_resolve_references()
        c.data.path = folder
        yield c, note


class LatentSource:
    """Random access to one split's latents (memory-mapped), their flipped copies and labels."""

    flips_itself = True

    def __init__(self, path: str, split: str):
        self.path, self.split = path, split
        self.x = np.load(os.path.join(path, f"{split}.npy"), mmap_mode="r")
        flipped = os.path.join(path, f"{split}_flipped.npy")
        self.x_flipped = np.load(flipped, mmap_mode="r") if os.path.isfile(flipped) else None
        labels = os.path.join(path, f"{split}_labels.npy")
        self.y = np.load(labels) if os.path.isfile(labels) else None

    def __reduce__(self):  # a loader worker maps the files again rather than receiving their contents
        return LatentSource, (self.path, self.split)

    def __len__(self):
        return len(self.x)

    def get(self, indices, flip=None):
        idx = np.asarray(indices)
        out = np.asarray(self.x[np.sort(idx)])[np.argsort(np.argsort(idx))]  # sorted reads of the memory map
        if flip is not None and np.any(flip):
            if self.x_flipped is None:
                raise ValueError("these latents were encoded without flipped copies: set config.data.random_flip=False")
            f = idx[flip]
            out[flip] = np.asarray(self.x_flipped[np.sort(f)])[np.argsort(np.argsort(f))]
        return out

    def labels(self, indices):
        return self.y[np.asarray(indices)].astype(np.int32)

    def get_labelled(self, indices):
        return self.get(indices), self.labels(indices)

    def fingerprint(self) -> str:
        """The split's hash as encode_latents wrote it into meta.json, or, for latents encoded before it did, of the
        arrays here when they are small; large ones (minutes to hash at every start) say how to add it."""
        stored = read_meta(self.path)["splits"][self.split].get("fingerprint")
        if stored:
            return stored
        size = sum(a.nbytes for a in (self.x, self.x_flipped) if a is not None)
        if size > HASH_AT_START_BYTES:
            return f"{fingerprint.UNKNOWN} (meta.json has none: run its encode_latents command again to add it)"
        return latent_fingerprint(self.path, self.split)


def latent_fingerprint(path: str, split: str) -> str:
    """The content hash of one split's latents: the arrays, their flipped copies and labels where they exist."""
    names = (f"{split}.npy", f"{split}_flipped.npy", f"{split}_labels.npy")
    files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
    return fingerprint.of_arrays(*(np.load(f, mmap_mode="r") for f in files))


@DATASETS.register
class Latents(Dataset):
    """Latents written by data/encode_latents.py (image_size / channels: the latents', checked)."""

    name = "latents"
    dtype = "float32"
    FIELDS = dict(
        path=Path("", mutable=True),  # the folder written by python -m data.encode_latents
        # the diffusers autoencoder that decodes samples ("": the one meta.json names; "embedded:mnist" the project's)
        autoencoder=Path("", mutable=True),
        # the latents' class count: -1 takes meta.json's; a count is checked against it, and is what --mode=compile
        # assumes before the latents are encoded (planned_meta)
        num_classes=Int(-1, 0, extra=(-1,), mutable=True),
        **flip_fields(False),
    )
    COMMON_DEFAULTS = {}

    @classmethod
    def check(cls, cfg, ctx):
        meta = read_meta(cfg.path)
        h, w, c = meta["latent_shape"]
        if cfg.image_size != h or cfg.channels != c:
            raise FieldError(
                "image_size" if cfg.image_size != h else "channels",
                cfg.image_size if cfg.image_size != h else cfg.channels,
                f"the latents in {cfg.path} are {h}x{w}x{c}: set config.data.image_size={h} config.data.channels={c}",
            )
        ae = cls.autoencoder_path(cfg)
        where = "this field" if cfg.autoencoder else "meta.json"
        if not ae.startswith("embedded:"):
            config_file = (
                ae
                if ae.endswith(".json")
                else os.path.join(ae if os.path.isdir(ae) else os.path.dirname(ae), "config.json")
            )
            if not os.path.isfile(config_file):
                raise FieldError(
                    "autoencoder",
                    cfg.autoencoder,
                    f"the autoencoder that decodes samples ({ae!r}, from {where}) is not a diffusers model here "
                    "(no config.json): set config.data.autoencoder to its folder",
                )
            with open(config_file) as f:
                channels = json.load(f).get("latent_channels")
            if channels is not None and channels != meta["latent_shape"][2] and meta.get("kind") == "kl":
                raise FieldError(
                    "autoencoder",
                    cfg.autoencoder,
                    f"{ae!r} has {channels} latent channels; the latents were encoded with "
                    f"{meta['latent_shape'][2]} (by {meta['autoencoder']!r})",
                )
        if cfg.num_classes >= 0 and cfg.num_classes != meta.get("num_classes", 0):
            raise FieldError(
                "num_classes", cfg.num_classes, f"the latents in {cfg.path} have {meta.get('num_classes', 0)} classes"
            )
        if cfg.random_flip and not meta.get("flipped"):
            raise FieldError("random_flip", True, f"the latents in {cfg.path} were encoded without flipped copies")

    @classmethod
    def classes(cls, cfg) -> int:
        try:
            return int(read_meta(cfg.path).get("num_classes", 0))
        except FieldError:
            return 0  # check() reports the problem with data.path

    @classmethod
    def source_name(cls, cfg) -> str:
        return read_meta(cfg.path)["source"]["name"]

    @classmethod
    def describe(cls):
        return "latents"

    @classmethod
    def load(cls, cfg, split):
        if split not in read_meta(cfg.path)["splits"]:
            raise DatasetNotFound(
                f"config.data.path={cfg.path!r} has no {split!r} split: its dataset has none "
                "(encode_latents skipped it)"
            )
        return LatentSource(cfg.path, split)

    @classmethod
    def pixels(cls, cfg, split):
        from ml_collections import ConfigDict

        from data.base import load_split

        return load_split(ConfigDict(read_meta(cfg.path)["source"]), split)

    @classmethod
    def autoencoder_path(cls, cfg) -> str:
        return os.path.expanduser(cfg.autoencoder or read_meta(cfg.path)["autoencoder"])
