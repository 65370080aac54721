"""The FID InceptionV3 (pool3, 2048 features) in Flax, with pytorch-fid's weights read from a file.

Architecture: pytorch-fid's `InceptionV3(output_blocks=[3], resize_input=True, normalize_input=True,
use_fid_inception=True)` (github.com/mseitzer/pytorch-fid, src/pytorch_fid/inception.py), the port of TensorFlow's
2015-12-05 Inception graph that the original FID code uses: torchvision's InceptionV3 trunk with the FID patches
(average pools in Mixed_5*, Mixed_6b-e and Mixed_7b exclude the padding from the mean, Mixed_7c's pool branch is a
3x3 max pool), batch norm with eps 0.001 in inference mode. Inputs: uint8 images [N, H, W, C] (C = 1 is repeated to
RGB), scaled to [0, 1], resized to 299x299 bilinearly with half-pixel centres and no antialiasing (torch's
F.interpolate(mode="bilinear", align_corners=False)), then to [-1, 1]. Output: the global average pool, [N, 2048].

Weights: pytorch-fid's release file pt_inception-2015-12-05-6726825d.pth (docs/evaluation.md#fid-and-kid: where to get
it), read without PyTorch by core/torch_file.py and mapped by name: `X.conv.weight` [O, I, kh, kw] -> Flax kernel
[kh, kw, I, O]; `X.bn.{weight, bias, running_mean, running_var}` -> scale, bias, mean, var. tests/test_inception.py
compares the features with pytorch-fid's own module on the same weights (fixture made by
tests/fixtures/make_inception_fixture.py).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

FEATURE_DIM = 2048
BN_EPS = 1e-3


class BasicConv(nn.Module):
    features: int
    kernel: tuple
    strides: tuple = (1, 1)
    padding: tuple = (0, 0)

    @nn.compact
    def __call__(self, x):
        ph, pw = self.padding
        x = nn.Conv(
            self.features, self.kernel, self.strides, padding=((ph, ph), (pw, pw)), use_bias=False, name="conv"
        )(x)
        x = nn.BatchNorm(use_running_average=True, epsilon=BN_EPS, name="bn")(x)
        return nn.relu(x)


def _avg_pool_same(x):  # TF's average pool: padding not counted in the mean (FID patch)
    return nn.avg_pool(x, (3, 3), (1, 1), padding=((1, 1), (1, 1)), count_include_pad=False)


def _max_pool_same(x):
    return nn.max_pool(x, (3, 3), (1, 1), padding=((1, 1), (1, 1)))


def _max_pool_down(x):
    return nn.max_pool(x, (3, 3), (2, 2))


class InceptionA(nn.Module):
    pool_features: int

    @nn.compact
    def __call__(self, x):
        b1 = BasicConv(64, (1, 1), name="branch1x1")(x)
        b5 = BasicConv(48, (1, 1), name="branch5x5_1")(x)
        b5 = BasicConv(64, (5, 5), padding=(2, 2), name="branch5x5_2")(b5)
        b3 = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        b3 = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(b3)
        b3 = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_3")(b3)
        bp = BasicConv(self.pool_features, (1, 1), name="branch_pool")(_avg_pool_same(x))
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(nn.Module):
    @nn.compact
    def __call__(self, x):
        b3 = BasicConv(384, (3, 3), strides=(2, 2), name="branch3x3")(x)
        bd = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(bd)
        bd = BasicConv(96, (3, 3), strides=(2, 2), name="branch3x3dbl_3")(bd)
        return jnp.concatenate([b3, bd, _max_pool_down(x)], axis=-1)


class InceptionC(nn.Module):
    channels_7x7: int

    @nn.compact
    def __call__(self, x):
        c7 = self.channels_7x7
        b1 = BasicConv(192, (1, 1), name="branch1x1")(x)
        b7 = BasicConv(c7, (1, 1), name="branch7x7_1")(x)
        b7 = BasicConv(c7, (1, 7), padding=(0, 3), name="branch7x7_2")(b7)
        b7 = BasicConv(192, (7, 1), padding=(3, 0), name="branch7x7_3")(b7)
        bd = BasicConv(c7, (1, 1), name="branch7x7dbl_1")(x)
        bd = BasicConv(c7, (7, 1), padding=(3, 0), name="branch7x7dbl_2")(bd)
        bd = BasicConv(c7, (1, 7), padding=(0, 3), name="branch7x7dbl_3")(bd)
        bd = BasicConv(c7, (7, 1), padding=(3, 0), name="branch7x7dbl_4")(bd)
        bd = BasicConv(192, (1, 7), padding=(0, 3), name="branch7x7dbl_5")(bd)
        bp = BasicConv(192, (1, 1), name="branch_pool")(_avg_pool_same(x))
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(nn.Module):
    @nn.compact
    def __call__(self, x):
        b3 = BasicConv(192, (1, 1), name="branch3x3_1")(x)
        b3 = BasicConv(320, (3, 3), strides=(2, 2), name="branch3x3_2")(b3)
        b7 = BasicConv(192, (1, 1), name="branch7x7x3_1")(x)
        b7 = BasicConv(192, (1, 7), padding=(0, 3), name="branch7x7x3_2")(b7)
        b7 = BasicConv(192, (7, 1), padding=(3, 0), name="branch7x7x3_3")(b7)
        b7 = BasicConv(192, (3, 3), strides=(2, 2), name="branch7x7x3_4")(b7)
        return jnp.concatenate([b3, b7, _max_pool_down(x)], axis=-1)


class InceptionE(nn.Module):
    max_pool: bool  # FIDInceptionE_2 (Mixed_7c) pools with max, FIDInceptionE_1 (Mixed_7b) with a TF average

    @nn.compact
    def __call__(self, x):
        b1 = BasicConv(320, (1, 1), name="branch1x1")(x)
        b3 = BasicConv(384, (1, 1), name="branch3x3_1")(x)
        b3 = jnp.concatenate(
            [
                BasicConv(384, (1, 3), padding=(0, 1), name="branch3x3_2a")(b3),
                BasicConv(384, (3, 1), padding=(1, 0), name="branch3x3_2b")(b3),
            ],
            axis=-1,
        )
        bd = BasicConv(448, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(384, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(bd)
        bd = jnp.concatenate(
            [
                BasicConv(384, (1, 3), padding=(0, 1), name="branch3x3dbl_3a")(bd),
                BasicConv(384, (3, 1), padding=(1, 0), name="branch3x3dbl_3b")(bd),
            ],
            axis=-1,
        )
        pooled = _max_pool_same(x) if self.max_pool else _avg_pool_same(x)
        bp = BasicConv(192, (1, 1), name="branch_pool")(pooled)
        return jnp.concatenate([b1, b3, bd, bp], axis=-1)


class InceptionV3(nn.Module):
    """uint8 [N, H, W, C] -> pool3 features float32 [N, 2048]."""

    @nn.compact
    def __call__(self, images_u8):
        x = images_u8.astype(jnp.float32) / 255.0
        if x.shape[-1] == 1:
            x = jnp.repeat(x, 3, axis=-1)
        x = jax.image.resize(x, (x.shape[0], 299, 299, 3), method="bilinear", antialias=False)
        x = 2.0 * x - 1.0
        x = BasicConv(32, (3, 3), strides=(2, 2), name="Conv2d_1a_3x3")(x)
        x = BasicConv(32, (3, 3), name="Conv2d_2a_3x3")(x)
        x = BasicConv(64, (3, 3), padding=(1, 1), name="Conv2d_2b_3x3")(x)
        x = _max_pool_down(x)
        x = BasicConv(80, (1, 1), name="Conv2d_3b_1x1")(x)
        x = BasicConv(192, (3, 3), name="Conv2d_4a_3x3")(x)
        x = _max_pool_down(x)
        x = InceptionA(32, name="Mixed_5b")(x)
        x = InceptionA(64, name="Mixed_5c")(x)
        x = InceptionA(64, name="Mixed_5d")(x)
        x = InceptionB(name="Mixed_6a")(x)
        for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
            x = InceptionC(c7, name=name)(x)
        x = InceptionD(name="Mixed_7a")(x)
        x = InceptionE(max_pool=False, name="Mixed_7b")(x)
        x = InceptionE(max_pool=True, name="Mixed_7c")(x)
        return x.mean(axis=(1, 2))


def variables_from_state_dict(state_dict: dict):
    """Flax variables {params, batch_stats} of InceptionV3 from pytorch-fid's state dict {name: array}. Raises
    ValueError naming the first missing or mis-shaped entry (a file of another network)."""
    template = jax.eval_shape(lambda: InceptionV3().init(jax.random.PRNGKey(0), jnp.zeros((1, 75, 75, 3), jnp.uint8)))
    torch_name = {
        ("params", "conv", "kernel"): "conv.weight",
        ("params", "bn", "scale"): "bn.weight",
        ("params", "bn", "bias"): "bn.bias",
        ("batch_stats", "bn", "mean"): "bn.running_mean",
        ("batch_stats", "bn", "var"): "bn.running_var",
    }

    def convert(path, leaf):
        keys = [p.key for p in path]
        collection, modules, (layer, field) = keys[0], keys[1:-2], keys[-2:]
        name = ".".join(modules + [torch_name[(collection, layer, field)]])
        if name not in state_dict:
            raise ValueError(f"the weights file has no {name!r}: not pytorch-fid's FID Inception weights")
        a = np.asarray(state_dict[name], np.float32)
        if field == "kernel":
            a = a.transpose(2, 3, 1, 0)  # [O, I, kh, kw] -> [kh, kw, I, O]
        if a.shape != leaf.shape:
            raise ValueError(f"{name!r} has shape {a.shape} in the weights file, the FID Inception needs {leaf.shape}")
        return jnp.asarray(a)

    return jax.tree_util.tree_map_with_path(convert, template)


def load_weights(path: str):
    """Flax variables from pytorch-fid's .pth (read without PyTorch) or an .npz of the same names."""
    if path.endswith(".npz"):
        with np.load(path) as z:
            return variables_from_state_dict({k: z[k] for k in z.files})
    from core.torch_file import load_state_dict

    return variables_from_state_dict(load_state_dict(path))


def make_feature_fn(variables, batch: int = 200):
    """features(images_u8 [N, H, W, C], tick=None) -> float64 [N, 2048], in batches of `batch` on the default
    device; tick(n) after each batch of n images."""
    fn = jax.jit(InceptionV3().apply)  # the weights as an argument, not 87 MB of constants baked into the program
    variables = jax.device_put(variables, jax.local_devices()[0])

    def features(images_u8, tick=None):
        out = []
        for i in range(0, len(images_u8), batch):
            x = np.asarray(images_u8[i : i + batch])
            out.append(np.asarray(fn(variables, x)))
            if tick is not None:
                tick(len(x))
        return np.concatenate(out).astype(np.float64)

    return features
