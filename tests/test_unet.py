import jax
import jax.numpy as jnp
import pytest

from config.fields import FieldError
from configs import cifar10
from models import UNet, check_image_size, make_model


def n_params(tree):
    return sum(x.size for x in jax.tree.leaves(tree))


def test_cifar10_unet_has_ddpm_parameter_count():
    c = cifar10.get_config()
    shapes = jax.eval_shape(
        lambda: make_model(c.model).init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), jnp.zeros((1,), jnp.int32))
    )
    assert n_params(shapes) == pytest.approx(35.7e6, rel=2e-3)


@pytest.mark.parametrize("size,channels", [(16, 3), (12, 1)])  # 8x8x1: every digits test
def test_output_shape_any_size(size, channels):
    m = UNet(ch=8, ch_mult=(1, 2), num_res_blocks=1, attn_resolutions=(size // 2,), num_groups=4)
    x = jnp.ones((2, size, size, channels))
    t = jnp.array([0, 999])
    out = jax.jit(
        lambda: m.apply(m.init(jax.random.PRNGKey(0), x, t), x, t, train=True, rngs={"dropout": jax.random.PRNGKey(1)})
    )()
    assert out.shape == x.shape and out.dtype == jnp.float32
    # zero-initialised output conv: the network starts at exactly zero
    assert float(jnp.abs(out).max()) == 0.0


def test_bad_image_sizes_are_refused():
    with pytest.raises(
        FieldError,
        match=r"^ch_mult=\(1, 2, 2\) is not allowed: 2 downsamplings need an image size "
        r"that is a positive multiple of 4; config.data.image_size is 10$",
    ):
        check_image_size(10, (1, 2, 2), ())
    with pytest.raises(
        FieldError,
        match=r"^attn_resolutions=\(2,\) is not allowed: \[2\] is not a resolution of this "
        r"UNet; allowed: \[8, 4\]$",
    ):
        check_image_size(8, (1, 2), (2,))
