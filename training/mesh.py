"""The device mesh and the shardings built from the config."""

import jax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

DATA = "data"


def data_axis_size(mesh_cfg) -> int:
    n = mesh_cfg.data
    return jax.device_count() if n == -1 else int(n)


def make_mesh(mesh_cfg) -> jax.sharding.Mesh:
    """A 1-D mesh named 'data' over `config.mesh.data` devices (all by default; pass config.mesh). Axis types are
    explicit Auto: the default changed across JAX versions (style.md)."""
    n = data_axis_size(mesh_cfg)
    return jax.make_mesh((n,), (DATA,), axis_types=(AxisType.Auto,), devices=jax.devices()[:n])


def replicated(mesh):
    return NamedSharding(mesh, P())


def batch_sharding(mesh):
    return NamedSharding(mesh, P(DATA))


def row_constraint(mesh):
    """constrain(x, axis): x sharded over the data axis along `axis` (inside jit), for training/rows.py."""

    def constrain(x, axis):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*([None] * axis), DATA)))

    return constrain


def fsdp_sharding(x, mesh):
    """Shard an array over the data axis along its largest dimension that the axis size divides (FSDP-style);
    replicate scalars and arrays with no such dimension (biases of odd sizes, norms)."""
    n = mesh.shape[DATA]
    dims = [i for i, d in enumerate(x.shape) if d >= n and d % n == 0]
    if n == 1 or not dims:
        return replicated(mesh)
    i = max(dims, key=lambda i: (x.shape[i], -i))
    return NamedSharding(mesh, P(*([None] * i + [DATA])))


def state_shardings(abstract_state, mesh, shard_params: bool):
    """Shardings of the train state: all replicated, or with config.mesh.shard_params the model parameters, their
    optimizer moments and the EMA sharded over the data axis (FSDP-style; XLA gathers each layer's weights where
    the step needs them). The step counter, the RNG and the sampler's (small) state stay replicated."""
    rep = jax.tree.map(lambda _: replicated(mesh), abstract_state)
    if not shard_params:
        return rep
    fsdp = lambda tree: jax.tree.map(lambda x: fsdp_sharding(x, mesh), tree)
    return rep.replace(
        params=fsdp(abstract_state.params),
        opt_state=fsdp(abstract_state.opt_state),
        ema_params=fsdp(abstract_state.ema_params),
    )


BARRIER_TIMEOUT_MINUTES = 60  # a process that dies fails the barrier at once (the coordinator's heartbeat), not here


def wait_for_every_process(name: str):
    """Block until every JAX process has called this with the same name (once per name in a run); nothing with one
    process. Uses the coordination service's barrier, not a collective: on CPU hosts, XLA's gloo collectives give
    the processes 30 s to reach the first collective of a new device group, and two processes compiling the same
    step on a loaded machine have been measured further apart than that (the first step then fails with "Gloo
    context initialization failed: DEADLINE_EXCEEDED")."""
    if jax.process_count() == 1:
        return
    from orbax.checkpoint import multihost

    multihost.get_barrier_sync_fn()(key=name, timeout_ms=BARRIER_TIMEOUT_MINUTES * 60_000)
