"""Step-indexed batches, loaded through Grain: the batch of step s is a pure function of (seed, s), so resuming
continues the data order exactly without saving iterator state, and every process computes its own shard without
talking to the others.

The global stream is the concatenation of per-epoch permutations perm_e = default_rng([seed, e]).permutation(N);
step s takes positions [s B, (s + 1) B); with random flips, flip_mask(seed, s, B) says which images of the step's
batch are mirrored. Process p of P reads rows [p B/P, (p + 1) B/P) of that global batch, and
`jax.make_array_from_process_local_data` assembles the global array. This is the order of the loader before Grain,
bit for bit (tests/test_data.py), so workdirs written before it resume unchanged.

Grain (google/grain) runs it: a `MapDataset` over step numbers whose element is a process's local batch of that
step (`StepBatch`: the indices, the reads and decoding, the flips). `config.data.workers` = 0 computes the batches in
this process on one prefetch thread; W > 0 in W worker processes (Grain's `mp_prefetch`: worker w computes steps
w, w + W, ...; Grain hands them back in step order), each holding at most `prefetch` finished batches. An error in
a worker comes back as a value and is raised in the main process by __next__ (a CorruptRecord names the dataset,
split and record). Each epoch's permutation is computed once per worker (EpochOrder caches it), not once per step
(its cost at ImageNet's size: docs/benchmarks/speed.md#the-loaders-epoch-order-2026-12-02).
"""

import pickle

import jax
import numpy as np

FOREVER = 1 << 40  # steps in the MapDataset: as many as any run takes


class EpochOrder:
    """The global order of the N records for `seed`: epoch e is default_rng([seed, e]).permutation(N), computed when
    first asked for and kept while the batches read it (the newest few epochs)."""

    KEEP = 3  # a batch spans at most ceil(B / N) + 1 epochs; steps move forward

    def __init__(self, seed: int, n: int):
        self.seed, self.n, self.perms = seed, n, {}

    def perm(self, e: int) -> np.ndarray:
        if e not in self.perms:
            while len(self.perms) >= max(self.KEEP, 1):
                self.perms.pop(min(self.perms))
            self.perms[e] = np.random.default_rng([self.seed, int(e)]).permutation(self.n)
        return self.perms[e]

    def batch(self, step: int, batch_size: int) -> np.ndarray:
        """[B] int64: the records of step `step`'s global batch."""
        start = step * batch_size
        pos = np.arange(start, start + batch_size)
        epochs, offsets = pos // self.n, pos % self.n
        out = np.empty(batch_size, np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self.perm(int(e))[offsets[sel]]
        return out


def global_batch_indices(seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
    return EpochOrder(seed, n).batch(step, batch_size)


def flip_mask(seed: int, step: int, batch_size: int) -> np.ndarray:
    """Which images of step `step`'s global batch are flipped horizontally: [B] bool, each with probability 1/2, a
    pure function of (seed, step, position)."""
    return np.random.default_rng([seed, step, 0xF11F]).random(batch_size) < 0.5


class Failure:
    """An error raised while computing a batch, carried back from a worker as a value (an exception Grain's worker
    cannot pickle would hang it)."""

    def __init__(self, step: int, error: BaseException):
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:
            error = RuntimeError(f"loading the batch of step {step}: {type(error).__name__}: {error}")
        self.step, self.error = step, error


class StepBatch:
    """step -> this process's rows [lo, hi) of the step's global batch (uint8 images or float latents [b, H, W, C],
    or {"image", "label"}), or a Failure. Pickled into Grain's worker processes with its source."""

    def __init__(self, source, seed, batch_size, lo, hi, random_flip=False, labels=False):
        self.source, self.seed, self.B, self.lo, self.hi = source, seed, batch_size, lo, hi
        self.random_flip, self.with_labels = random_flip, labels
        self.order = EpochOrder(seed, len(source))

    def local_batch(self, step: int):
        idx = self.order.batch(step, self.B)[self.lo : self.hi]
        flip = flip_mask(self.seed, step, self.B)[self.lo : self.hi] if self.random_flip else None
        labels = None
        if getattr(self.source, "flips_itself", False):
            # e.g. latents with the latents of the flipped images encoded beforehand
            images = self.source.get(idx, flip=flip)
            labels = self.source.labels(idx) if self.with_labels else None
        elif self.with_labels:
            images, labels = self.source.get_labelled(idx)
        else:
            images = self.source.get(idx)
        if self.random_flip and not getattr(self.source, "flips_itself", False):
            images = np.where(flip[:, None, None, None], images[:, :, ::-1], images)
        return images if labels is None else {"image": images, "label": labels}

    def __call__(self, step: int):
        try:
            return self.local_batch(int(step))
        except Exception as e:  # raised in the main process by BatchIterator.__next__
            return Failure(int(step), e)


def _absl_flags_parsed():
    """Grain's worker start reads an absl flag: parse none when the caller has not parsed flags (a notebook, a
    test); main.py has."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


class BatchIterator:
    """Yields (step, batch) from `start_step`: the batch is the global jax.Array [B, H, W, C] (uint8 images, or float
    latents), or with labels=True the dict {"image": that, "label": int32 [B]}. workers = 0: computed in this
    process, `prefetch` batches ahead on one thread; workers > 0: in that many Grain worker processes, each at most
    `prefetch` batches ahead."""

    def __init__(
        self,
        source,
        seed,
        batch_size,
        sharding,
        start_step=0,
        prefetch=2,
        random_flip=False,
        labels=False,
        workers=0,
    ):
        import grain

        P, p = jax.process_count(), jax.process_index()
        self.sharding, self.step = sharding, start_step
        fn = StepBatch(source, seed, batch_size, p * batch_size // P, (p + 1) * batch_size // P, random_flip, labels)
        steps = grain.MapDataset.range(start_step, start_step + FOREVER).map(fn)
        if workers > 0:
            _absl_flags_parsed()
            options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=prefetch)
            ds = steps.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).mp_prefetch(options)
        else:
            ds = steps.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=prefetch))
        self.it = iter(ds)

    def __next__(self):
        local = next(self.it)
        s, self.step = self.step, self.step + 1
        if isinstance(local, Failure):
            raise local.error
        return s, jax.tree.map(lambda a: jax.make_array_from_process_local_data(self.sharding, a), local)

    def __iter__(self):
        return self

    def close(self):
        close = getattr(self.it, "close", None)
        if close is not None:
            close()  # stops Grain's threads and worker processes
