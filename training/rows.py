"""Running a network over many independent rows (image, timestep, noise) spread over the data axis, in chunks of at
most a given number of rows per device: the learned sampler's reward probes and timestep sweep.

Rows are laid out as jax arrays with a leading row axis. `map_rows` pads the rows to a multiple of the device count,
splits them into contiguous per-device blocks (the layout of an array sharded over the data axis, so rows that
already live on a device stay there), and runs `fn` on chunks that take the same number of rows from every device's
block. Each chunk gets its own index, from which the caller derives its own random numbers (e.g. dropout masks).
"""

import jax
import jax.numpy as jnp


def same(x, axis):
    return x


def map_rows(fn, rows, num_shards: int = 1, rows_per_device: int = 0, constrain=same):
    """fn(rows_chunk, chunk_index) -> [n] per-row values, for a tuple `rows` of arrays with a leading row axis R.
    Returns [R]. rows_per_device <= 0: one chunk. `constrain(x, axis)` shards x over the data axis along `axis`."""
    R = rows[0].shape[0]
    D = num_shards
    per_dev = -(-R // D)
    c = per_dev if rows_per_device <= 0 else max(1, min(rows_per_device, per_dev))
    n = -(-per_dev // c)

    def blocks(a):
        """[R, ...] -> [n, D * c, ...]: chunk i holds rows i c .. (i + 1) c - 1 of every device's block."""
        if D * per_dev > R:  # rows that no device has yet (replicated inputs): pad at the end
            a = jnp.concatenate([a, jnp.broadcast_to(a[:1], (D * per_dev - R,) + a.shape[1:])])
        a = constrain(a, 0).reshape((D, per_dev) + a.shape[1:])
        if n * c > per_dev:  # pad each device's block with copies of its first row
            a = jnp.concatenate([a, jnp.broadcast_to(a[:, :1], (D, n * c - per_dev) + a.shape[2:])], axis=1)
        a = jnp.swapaxes(a.reshape((D, n, c) + a.shape[2:]), 0, 1)
        return constrain(a.reshape((n, D * c) + a.shape[3:]), 1)

    chunks = tuple(blocks(a) for a in rows)
    if n == 1:
        out = fn(tuple(constrain(a[0], 0) for a in chunks), 0)[None]
    else:
        out = jax.lax.map(lambda a: fn(tuple(constrain(x, 0) for x in a[0]), a[1]), (chunks, jnp.arange(n)))
    out = jnp.swapaxes(out.reshape((n, D, c)), 0, 1).reshape(D, n * c)[:, :per_dev]
    return out.reshape(D * per_dev)[:R]
