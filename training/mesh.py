"""The device mesh and the shardings built from the config."""
import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

DATA = "data"


def data_axis_size(config) -> int:
    n = config.mesh.data
    return jax.device_count() if n == -1 else int(n)


def make_mesh(config) -> jax.sharding.Mesh:
    """A 1-D mesh named 'data' over `config.mesh.data` devices (all by default). Axis types are explicit
    Auto: the default changed across JAX versions (style.md)."""
    n = data_axis_size(config)
    return jax.make_mesh((n,), (DATA,), axis_types=(AxisType.Auto,), devices=jax.devices()[:n])


def replicated(mesh):
    return NamedSharding(mesh, P())


def batch_sharding(mesh):
    return NamedSharding(mesh, P(DATA))


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
    return rep.replace(params=fsdp(abstract_state.params), opt_state=fsdp(abstract_state.opt_state),
                       ema_params=fsdp(abstract_state.ema_params))
