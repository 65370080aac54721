"""Step-indexed batches: the batch of step s is a pure function of (seed, s), so resuming continues the data order
exactly and every process can compute its own shard without talking to the others.

The global stream is the concatenation of per-epoch permutations perm_e = default_rng([seed, e]).permutation(N);
step s takes positions [s B, (s + 1) B); with random flips, flip_mask(seed, s, B) says which images of the step's
batch are mirrored. Process p of P reads rows [p B/P, (p + 1) B/P) of that global batch, and
`jax.make_array_from_process_local_data` assembles the global array.
"""

import queue
import threading

import jax
import numpy as np


def global_batch_indices(seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
    start = step * batch_size
    pos = np.arange(start, start + batch_size)
    epochs, offsets = pos // n, pos % n
    out = np.empty(batch_size, np.int64)
    for e in np.unique(epochs):
        perm = np.random.default_rng([seed, int(e)]).permutation(n)
        sel = epochs == e
        out[sel] = perm[offsets[sel]]
    return out


def flip_mask(seed: int, step: int, batch_size: int) -> np.ndarray:
    """Which images of step `step`'s global batch are flipped horizontally: [B] bool, each with probability 1/2, a
    pure function of (seed, step, position)."""
    return np.random.default_rng([seed, step, 0xF11F]).random(batch_size) < 0.5


class BatchIterator:
    """Yields (step, batch) from `start_step`, prefetching on a thread: the batch is the global jax.Array
    [B, H, W, C] (uint8 images, or float latents), or with labels=True the dict {"image": that, "label": int32 [B]}."""

    def __init__(self, source, seed, batch_size, sharding, start_step=0, prefetch=2, random_flip=False, labels=False):
        self.random_flip, self.with_labels = random_flip, labels
        self.source, self.seed, self.B, self.sharding = source, seed, batch_size, sharding
        P, p = jax.process_count(), jax.process_index()
        self.lo, self.hi = p * batch_size // P, (p + 1) * batch_size // P
        self.step = start_step
        self.q = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def local_batch(self, step):
        idx = global_batch_indices(self.seed, step, self.B, len(self.source))[self.lo : self.hi]
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

    def _work(self):
        s = self.step
        while not self._stop.is_set():
            try:
                item = (s, self.local_batch(s))
            except Exception as e:  # surfaced in the main thread
                item = (s, e)
            while not self._stop.is_set():
                try:
                    self.q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            s += 1

    def __next__(self):
        s, local = self.q.get()
        if isinstance(local, Exception):
            raise local
        return s, jax.tree.map(lambda a: jax.make_array_from_process_local_data(self.sharding, a), local)

    def __iter__(self):
        return self

    def close(self):
        self._stop.set()
