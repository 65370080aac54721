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
