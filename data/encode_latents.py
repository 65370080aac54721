"""Encode an image dataset into latents once, for latent diffusion (data/latents.py reads them):

    python -m data.encode_latents --dataset=mnist --autoencoder=embedded:mnist --output=latents/mnist
    python -m data.encode_latents --dataset=celeb_a_hq --data_dir=~/tensorflow_datasets \
        --autoencoder=/weights/ldm-celebahq-256/vqvae --output=latents/celebahq
    python -m data.encode_latents --dataset=folder --set=train_dir=/data/imagenet/train --set=class_folders=True \
        --set=num_classes=1000 --autoencoder=/weights/sd-vae-ft-ema --flip=yes --output=latents/imagenet256

`--set=FIELD=VALUE` sets a field of the dataset's config (config.data.FIELD: train_dir, image_size, ...). A split
the dataset does not have (tensorflow-datasets' celeb_a_hq has only "train") is skipped and recorded as absent.

Every split of the dataset is encoded in batches of --batch_size images, sharded over the local devices (the batch
padded to a multiple of their count). A KL autoencoder's latent is its posterior MEAN (deterministic; not a sample),
a VQ autoencoder's the pre-quantisation h (what the LDM trains on), both times the scaling factor. With flips (the
dataset's own random_flip default, or --flip) the mirrored images are encoded too.

Resumable: rows are written into memory-mapped .npy files and `meta.json` records how many rows of each split are
done after every batch; running the same command again continues where it stopped (a different command on the
same --output stops with the difference). A progress bar shows the rows done. Once a split is complete, meta.json
holds the content hash of its arrays (the runs that read them record it: latents encoded again, on another machine,
differ in their last bits); the same command on a complete folder adds it where it is missing.
"""

import json
import os
import sys

import numpy as np
from absl import flags

from data.base import DATASETS, dataset_classes, load_split
from data.latents import META, latent_fingerprint

FLAGS = flags.FLAGS


def _define_flags():
    flags.DEFINE_string("dataset", "mnist", "a registered image dataset (config.data.name)")
    flags.DEFINE_string("data_dir", "", "its tensorflow-datasets folder (config.data.data_dir)")
    flags.DEFINE_string(
        "autoencoder", "embedded:mnist", "a diffusers AutoencoderKL / VQModel folder, or embedded:mnist"
    )
    flags.DEFINE_string("output", None, "the folder to write (config.data.path of the latent run)")
    flags.DEFINE_enum("flip", "auto", ["auto", "yes", "no"], "encode mirrored copies (auto: the dataset's default)")
    flags.DEFINE_integer("batch_size", 256, "images per encoding call")
    flags.DEFINE_string("cache", "", "folder of the embedded autoencoder's cache (default ~/.cache/adaptive-timesteps)")
    flags.DEFINE_multi_string("set", [], "FIELD=VALUE: a field of the dataset's config (python literal or string)")


def encode_dataset(
    dataset: str,
    autoencoder: str,
    output: str,
    data_dir: str = "",
    flip: str = "auto",
    batch_size: int = 256,
    cache: str = "",
    progress: bool = True,
    fields: dict | None = None,
) -> dict:
    """Encode every split of `dataset` into `output` (resuming a partial run); returns meta.json's content."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from core.progress import bar as progress_bar
    from core.torch_file import NotAStateDict
    from data.embedded_autoencoder import resolve
    from latent import make_autoencoder

    data_cfg = DATASETS.default_config(dataset)
    data_cfg.name = dataset
    data_cfg.data_dir = data_dir
    for k, v in (fields or {}).items():
        if k not in data_cfg or k == "name":
            allowed = ", ".join(sorted(set(data_cfg) - {"name"}))
            raise SystemExit(f"error: --set={k}=... is not a field of dataset {dataset!r}: allowed: {allowed}")
        data_cfg[k] = v
    try:
        DATASETS.check(data_cfg, schema_context(data_cfg))
    except Exception as e:  # one line, as validation gives it
        raise SystemExit(f"error: {e}") from None
    flipped = {"auto": bool(data_cfg.random_flip), "yes": True, "no": False}[flip]
    try:
        ae = make_autoencoder(resolve(autoencoder, cache))
    except NotAStateDict as e:  # a weights file refused (damaged, or one that would run code): before any output
        raise SystemExit(f"error: --autoencoder={autoencoder}: {e}") from None
    h, w, c = data_cfg.image_size, data_cfg.image_size, data_cfg.channels
    latent_shape = list(ae.latent_shape((h, w, c)))
    want = dict(
        source=data_cfg.to_dict(),
        autoencoder=autoencoder,
        kind=ae.kind,
        scaling_factor=ae.scaling_factor,
        latent="posterior mean" if ae.kind == "kl" else "pre-quantisation h",
        latent_shape=latent_shape,
        num_classes=int(dataset_classes(data_cfg)),
        flipped=flipped,
    )
    os.makedirs(output, exist_ok=True)
    meta_path = os.path.join(output, META)
    meta = dict(want, splits={})
    if os.path.isfile(meta_path):
        with open(meta_path) as f:
            old = json.load(f)
        diff = {k: (old.get(k), v) for k, v in want.items() if old.get(k) != v and k != "source"}
        if old.get("source", {}).get("name") != dataset:
            diff["source"] = (old.get("source", {}).get("name"), dataset)
        if diff:
            raise SystemExit(
                f"error: --output={output} holds latents of another encoding ({diff}: (there, asked)); "
                "choose another --output"
            )
        meta = old

    def write_meta():
        tmp = meta_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=2)
        os.replace(tmp, meta_path)

    devices = jax.local_devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    B = -(-batch_size // len(devices)) * len(devices)
    encode = jax.jit(lambda p, x: ae.encode_fn(p, x.astype(jnp.float32) / 127.5 - 1.0, None), out_shardings=sharding)
    for split in ("train", "test"):
        try:
            source = load_split(data_cfg, split)
        except Exception as e:  # a split the dataset does not have
            if split == "train":
                raise
            print(f"encode_latents: no {split!r} split ({type(e).__name__}: {e}); skipped", file=sys.stderr)
            meta["splits"].pop(split, None)
            write_meta()
            continue
        n = len(source)
        info = meta["splits"].setdefault(split, dict(rows=n, done=0, complete=False))
        files = {"": False, "_flipped": True} if flipped else {"": False}
        arrays = {}
        for suffix in files:
            file = os.path.join(output, f"{split}{suffix}.npy")
            mode = "r+" if os.path.isfile(file) and info["done"] > 0 else "w+"
            arrays[suffix] = np.lib.format.open_memmap(file, mode=mode, dtype=np.float32, shape=(n, *latent_shape))
        labels = None
        if want["num_classes"]:
            file = os.path.join(output, f"{split}_labels.npy")
            mode = "r+" if os.path.isfile(file) and info["done"] > 0 else "w+"
            labels = np.lib.format.open_memmap(file, mode=mode, dtype=np.int32, shape=(n,))
        bar = progress_bar(n, f"encode {split}", unit="image", initial=info["done"], enabled=progress)
        for start in range(info["done"], n, B):
            idx = np.arange(start, min(start + B, n))
            if labels is not None:  # one read of the records for images and labels
                images, labels[idx] = source.get_labelled(idx)
                labels.flush()
            else:
                images = source.get(idx)
            for suffix, mirror in files.items():
                x = images[:, :, ::-1] if mirror else images
                x = np.concatenate([x, np.repeat(x[:1], B - len(x), axis=0)]) if len(x) < B else x
                z = np.asarray(encode(ae.params, jax.device_put(x, sharding)))[: len(idx)]
                arrays[suffix][idx] = z
                arrays[suffix].flush()
            info["done"] = int(idx[-1] + 1)
            write_meta()
            bar.update(len(idx))
        bar.close()
        for a in arrays.values():
            a.flush()
        info["fingerprint"] = latent_fingerprint(output, split)  # what the runs that read them record
        info["complete"] = True
        write_meta()
    return meta


def parse_value(kv: str):
    """'k=v' -> (k, v as a python literal, else the string)."""
    import ast

    if "=" not in kv:
        raise SystemExit(f"error: --set={kv} is not FIELD=VALUE")
    k, v = kv.split("=", 1)
    try:
        return k, ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return k, v


def schema_context(data_cfg):
    from config.fields import Context

    n = dataset_classes(data_cfg)
    return Context({"image_size": (data_cfg.image_size, "--set=image_size"), "num_classes": (n, "--dataset")})


def main(argv):
    del argv
    if not FLAGS.output:
        raise SystemExit("error: --output is required: the folder to write the latents into")
    meta = encode_dataset(
        FLAGS.dataset,
        FLAGS.autoencoder,
        FLAGS.output,
        FLAGS.data_dir,
        FLAGS.flip,
        FLAGS.batch_size,
        FLAGS.cache,
        fields=dict(parse_value(kv) for kv in FLAGS.set),
    )
    h, w, c = meta["latent_shape"]
    rows = ", ".join(f"{s} {i['rows']}" for s, i in meta["splits"].items())
    print(
        f"Latents: {FLAGS.output} ({rows} rows of "
        f"{h}x{w}x{c}). Train on them with --config.data.name=latents --config.data.path={FLAGS.output} "
        f"--config.data.image_size={h} --config.data.channels={c}",
        file=sys.stdout,
    )


if __name__ == "__main__":
    from core import cli

    _define_flags()
    cli.run(main)
