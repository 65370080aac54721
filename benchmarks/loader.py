"""How fast the Grain loader (data/pipeline.py) delivers batches on one host, per worker count, next to how fast the
train steps of the published configs would consume them on one host of a TPU v5p or an H100 machine.

    python benchmarks/loader.py                               # the four datasets, workers 0 1 2 4, 100,000 records
    python benchmarks/loader.py --records=5000 --jpegs=1000 --seconds=4       # a short run (results/loader.md)

Datasets, each written by this script into --dir (kept between runs) except the embedded digits:
- digits: the embedded 8x8 digits, in memory (data/digits.py).
- tfds_png: --records PNG-encoded 64x64x3 images (random pixels, about 12 KB each; ImageNet-64's PNGs are about
  9 KB) in tensorflow-datasets' array_record format, written by a tfds builder and read through tfds.data_source
  with PIL decoding (no TensorFlow): the record size of ImageNet-64.
- folder_jpeg: --jpegs JPEG files of 320x256 (quality 90) read by the folder dataset (data/folder.py): PIL decoding
  and ADM's center crop to 256x256, as for an ImageNet train/ tree.
- latents: --records float32 latents 32x32x4 in a memory-mapped .npy (data/latents.py), ImageNet-256's KL-f8 shape.
Each (dataset, workers) pair runs BatchIterator (random flips on, batch --batch, global arrays assembled on the local
devices as in training) for --seconds after its first --warmup batches (which include starting the workers), and
reports images/s.

Consumption: images/s = batch / step time, with step time = XLA's FLOPs of the compiled train step (cost_analysis,
as --mode=compile reports them) / (chips per host x peak FLOP/s x MFU). The FLOPs are those of the step with uniform
timesteps (the learned sampler adds its probes on top); they are compiled here on the CPU at two small batches and
extrapolated linearly to the published batch (every FLOP of the step is per example except the optimizer's and the
EMA's, which are per parameter: linear in the batch). Peaks from benchmarks/throughput.py's table (bfloat16 for a
bfloat16 model, else what XLA runs float32 at); chips per host: TPU v5p 4, H100 8; MFU --mfu (default 0.4).
"""

import argparse
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

HOSTS = {"TPU v5p": 4, "H100": 8}  # accelerators per host
CONSUMERS = {"cifar10": "cifar10.py:quad,uniform", "imagenet256_uvit": "imagenet256_uvit.py:uniform"}


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/loader_benchmark", help="where the synthetic datasets are written")
    p.add_argument("--records", type=int, default=100_000, help="PNG records and latents to write")
    p.add_argument("--jpegs", type=int, default=10_000, help="JPEG files in the image folder")
    p.add_argument("--workers", default="0,1,2,4")
    p.add_argument("--datasets", default="digits,tfds_png,folder_jpeg,latents")
    p.add_argument("--batch", type=int, default=256, help="global batch per step (one host)")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per (dataset, workers)")
    p.add_argument("--warmup", type=int, default=3, help="batches before timing (worker start included)")
    p.add_argument("--mfu", type=float, default=0.4)
    p.add_argument("--consumers", default="cifar10,imagenet256_uvit", help="'' to skip compiling")
    p.add_argument("--json", default="", help="write the results here")
    return p.parse_args()


class PngRecords:
    """A tfds array_record split of PNG bytes, decoded with PIL: uint8 [N, 64, 64, 3]."""

    def __init__(self, data_dir: str):
        import tensorflow_datasets as tfds

        self.data_dir = data_dir
        self.source = tfds.data_source("png_images", split="train", data_dir=data_dir)

    def __reduce__(self):
        return PngRecords, (self.data_dir,)

    def __len__(self):
        return len(self.source)

    def get(self, indices):
        from PIL import Image

        records = self.source.__getitems__([int(i) for i in indices])
        return np.stack([np.asarray(Image.open(io.BytesIO(r["png"])).convert("RGB")) for r in records])


def write_png_records(data_dir: str, n: int):
    import tensorflow_datasets as tfds
    from PIL import Image

    class PngImages(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            png = tfds.features.Tensor(shape=(), dtype=np.object_)
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"png": png}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(n)}

        def _generate_examples(self, n):
            rng = np.random.default_rng(0)
            for i in range(n):
                b = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(b, format="PNG")
                yield i, {"png": b.getvalue()}

    import shutil

    done = os.path.join(data_dir, "records.txt")  # the count written, after a complete write
    if os.path.isfile(done) and open(done).read() == str(n):  # noqa: SIM115
        return
    shutil.rmtree(os.path.join(data_dir, "png_images"), ignore_errors=True)
    PngImages(data_dir=data_dir, file_format="array_record").download_and_prepare()
    with open(done, "w") as f:
        f.write(str(n))


def write_jpegs(folder: str, n: int):
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(len(os.listdir(folder)), n):
        # smooth random images: JPEG sizes like photos' (pure noise would be far larger)
        small = rng.integers(0, 256, (16, 20, 3), dtype=np.uint8)
        Image.fromarray(small).resize((320, 256), Image.BICUBIC).save(os.path.join(folder, f"{i:07d}.jpg"), quality=90)


def write_latents(folder: str, n: int):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "train.npy")
    if os.path.isfile(path) and np.load(path, mmap_mode="r").shape[0] == n:
        return
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 32, 32, 4))
    rng = np.random.default_rng(0)
    for s in range(0, n, 10_000):
        x[s : s + 10_000] = rng.standard_normal((min(10_000, n - s), 32, 32, 4), dtype=np.float32)
    x.flush()
    np.save(os.path.join(folder, "train_flipped.npy"), x)  # the mirrored images' latents, as encode_latents writes


def source(name: str, args):
    from config.schema import default_config
    from data import load_split
    from data.folder import FolderSource
    from data.latents import LatentSource

    if name == "digits":
        return load_split(default_config().data, "train")
    if name == "tfds_png":
        write_png_records(os.path.join(args.dir, "tfds"), args.records)
        return PngRecords(os.path.join(args.dir, "tfds"))
    if name == "folder_jpeg":
        write_jpegs(os.path.join(args.dir, "jpegs"), args.jpegs)
        return FolderSource(os.path.join(args.dir, "jpegs"), 256, 3, False, 0, "train")
    if name == "latents":
        write_latents(os.path.join(args.dir, "latents"), args.records)
        return LatentSource(os.path.join(args.dir, "latents"), "train")
    raise SystemExit(f"error: --datasets: {name!r} is not one of digits, tfds_png, folder_jpeg, latents")


def images_per_second(src, workers: int, args) -> float:
    import jax

    from config.schema import default_config
    from data.pipeline import BatchIterator
    from training.mesh import batch_sharding, make_mesh

    sharding = batch_sharding(make_mesh(default_config().mesh))
    it = BatchIterator(src, 0, args.batch, sharding, random_flip=True, workers=workers)
    try:
        for _ in range(args.warmup):
            jax.block_until_ready(next(it)[1])
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            jax.block_until_ready(next(it)[1])
            n += 1
        return n * args.batch / (time.perf_counter() - t0)
    finally:
        it.close()


def step_flops(name: str):
    """(published batch, FLOPs of the uniform train step at it, model dtype): XLA's count at two small batches,
    extrapolated linearly."""
    import importlib

    from config.fields import override
    from data.latents import planned_latents
    from training import aot
    from training.setup import build

    module, _, variant = CONSUMERS[name].partition(":")
    base = importlib.import_module(f"configs.{module[:-3]}").get_config(variant)
    B = base.train.batch_size  # the published batch (override below changes `base` in place)
    flops = []
    small = (2, 4) if base.model.name != "unet" or base.data.image_size > 32 else (4, 8)
    for b in small:
        c = override(base, {"train.batch_size": b, "sampler.name": "uniform"})
        with planned_latents(c) as (c, _):
            setup = build(c)
            r = aot.step_report(setup, *aot.compile_step(setup))
        flops.append(r["flops"] * r["devices"])  # per step, all devices
    per_image = (flops[1] - flops[0]) / (small[1] - small[0])
    return B, flops[0] + per_image * (B - small[0]), base.model.dtype


def consumption(args):
    from benchmarks.throughput import peak_flops

    out = {}
    for name in [n for n in args.consumers.split(",") if n]:
        B, flops, dtype = step_flops(name)
        out[name] = dict(batch=B, step_gflop=flops / 1e9, dtype=dtype, hosts={})
        for kind, chips in HOSTS.items():
            peak = peak_flops(kind, dtype)
            step_s = flops / (chips * peak * args.mfu)
            out[name]["hosts"][kind] = dict(peak_tflops=peak / 1e12, chips=chips, images_per_s=B / step_s)
    return out


def main():
    args = parse()
    import jax

    from benchmarks.samplers import ROOT, as_given
    from core import fingerprint

    results = dict(
        machine=f"{os.cpu_count()} CPU cores, {jax.device_count()} {jax.devices()[0].platform} device(s)",
        environment=fingerprint.environment(ROOT),  # what the rates were measured on: versions, processor, ...
        args=as_given(args),
        loader={},
    )
    workers = [int(w) for w in args.workers.split(",")]
    for name in [n for n in args.datasets.split(",") if n]:
        src = source(name, args)
        for w in workers:
            rate = images_per_second(src, w, args)
            results["loader"][f"{name}/{w}"] = rate
            print(f"{name:12s} {len(src):>7,} records  workers {w}: {rate:10,.0f} images/s", flush=True)
    results["consumption"] = consumption(args)
    for name, r in results["consumption"].items():
        rates = ", ".join(
            f"{k} host ({h['chips']} x {h['peak_tflops']:.0f} TFLOP/s): {h['images_per_s']:,.0f}"
            for k, h in r["hosts"].items()
        )
        print(
            f"{name}: batch {r['batch']}, {r['step_gflop']:,.0f} GFLOP per step ({r['dtype']}); images/s consumed at "
            f"MFU {args.mfu}: {rates}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
