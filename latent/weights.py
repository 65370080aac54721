"""Read a diffusers autoencoder (config.json + weights) into a Flax module and its params, without PyTorch.

A path is a diffusers model directory (config.json and diffusion_pytorch_model.safetensors, else
diffusion_pytorch_model.bin), that directory's config.json, or one weights file with the config.json beside it.
.safetensors files are read by `safetensors.numpy`; anything else (.bin, .pth, .pt) as a torch.save'd state dict
by core/torch_file.py, which runs no code from the file.

State-dict keys map to Flax parameter paths by name (`a.down_blocks.0.conv.weight` <-> a/down_blocks_0/conv/kernel):
conv weights [O, I, kh, kw] -> kernels [kh, kw, I, O], linear weights [O, I] -> [I, O] (also [O, I, 1, 1], the
1x1-conv form), norm weight -> scale, the codebook's `embedding.weight` -> `embedding` as is. Older checkpoints
(the original sd-vae-ft-* .bin files) name the mid block's attention query / key / value / proj_attn; they are
renamed to to_q / to_k / to_v / to_out.0 as diffusers' own loader does. Every array must be used and every
parameter found, with the shape the config implies; all arrays are cast to float32.
"""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from latent.autoencoder_kl import AutoencoderKL, KLConfig
from latent.vq import VQConfig, VQModel

WEIGHT_FILES = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")
CLASSES = {"AutoencoderKL": (AutoencoderKL, KLConfig), "VQModel": (VQModel, VQConfig)}
_LEGACY_ATTENTION = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out.0"}


def resolve(path: str) -> tuple[str, str]:
    """(config.json path, weights file path) of a model directory, its config.json, or a weights file."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or directory (expected a diffusers model directory)")
    if os.path.isfile(path) and os.path.basename(path) == "config.json":
        path = os.path.dirname(path) or "."
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
        found = [os.path.join(path, name) for name in WEIGHT_FILES if os.path.isfile(os.path.join(path, name))]
        if not found and os.path.isfile(config):
            raise FileNotFoundError(f"{path} has no {' or '.join(WEIGHT_FILES)}")
        weights = found[0] if found else None
    else:
        config, weights = os.path.join(os.path.dirname(path) or ".", "config.json"), path
    if not os.path.isfile(config):
        raise FileNotFoundError(f"{config} not found: a diffusers model needs its config.json beside the weights")
    return config, weights


def read_config(config_path: str) -> dict:
    with open(config_path) as f:
        return json.load(f)


def model_from_config(config: dict, source: str = "config.json"):
    """The Flax module (AutoencoderKL or VQModel) that a diffusers config.json describes."""
    name = config.get("_class_name") or ("VQModel" if "num_vq_embeddings" in config else "AutoencoderKL")
    if name not in CLASSES:
        raise ValueError(f"{source}: unsupported model class {name!r} (supported: {', '.join(CLASSES)})")
    module, cfg = CLASSES[name]
    return module(cfg.from_diffusers(config, source))


def read_state_dict(weights_path: str) -> dict:
    """{key: np.ndarray} of a .safetensors file or a torch.save'd state dict."""
    if weights_path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        return load_file(weights_path)
    from core.torch_file import load_state_dict

    return dict(load_state_dict(weights_path))


def _rename_legacy(state_dict: dict, source: str) -> dict:
    out = {}
    for key, value in state_dict.items():
        m = re.fullmatch(r"(.*\.attentions\.\d+\.)(query|key|value|proj_attn)\.(weight|bias)", key)
        new = f"{m.group(1)}{_LEGACY_ATTENTION[m.group(2)]}.{m.group(3)}" if m else key
        if new in out:
            raise ValueError(f"{source}: both {key!r} and its other name {new!r}")
        out[new] = value
    return out


def _torch_key(path: tuple) -> str:
    parts = []
    for name in path[:-1]:
        m = re.fullmatch(r"(.+)_(\d+)", name)
        parts += [m.group(1), m.group(2)] if m else [name]
    return ".".join(parts + ["bias" if path[-1] == "bias" else "weight"])


def _torch_shape(leaf: str, shape: tuple) -> tuple:
    if leaf == "kernel" and len(shape) == 4:
        return (shape[3], shape[2], shape[0], shape[1])
    if leaf == "kernel" and len(shape) == 2:
        return (shape[1], shape[0])
    return tuple(shape)


def _convert(leaf: str, shape: tuple, array: np.ndarray) -> np.ndarray:
    if leaf == "kernel" and len(shape) == 4:
        return array.transpose(2, 3, 1, 0)
    if leaf == "kernel" and len(shape) == 2:
        return array.reshape(array.shape[:2]).T
    return array


def params_from_state_dict(model, state_dict: dict, source: str = "the weights file") -> dict:
    """Flax params of `model` from a diffusers state dict; errors name the key (and both shapes)."""
    c = model.config
    size = c.downsample_factor
    x = jax.ShapeDtypeStruct((1, size, size, c.in_channels), jnp.float32)
    shapes = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
    state_dict = _rename_legacy(state_dict, source)
    used, flat = set(), {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
        names = tuple(p.key for p in path)
        key, want = _torch_key(names), _torch_shape(names[-1], leaf.shape)
        if key not in state_dict:
            raise ValueError(f"{source} has no {key!r}, which the config needs (shape {want})")
        array = np.asarray(state_dict[key])
        legacy_1x1 = len(want) == 2 and array.shape == (*want, 1, 1)
        if array.shape != want and not legacy_1x1:
            raise ValueError(f"{source}: {key!r} has shape {tuple(array.shape)}, the config needs {want}")
        used.add(key)
        flat[names] = jnp.asarray(_convert(names[-1], leaf.shape, array.astype(np.float32)))
    extra = sorted(set(state_dict) - used)
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ValueError(f"{source} has an unexpected key {extra[0]!r}{more}: not part of this config's model")
    params = {}
    for names, value in flat.items():
        node = params
        for name in names[:-1]:
            node = node.setdefault(name, {})
        node[names[-1]] = value
    return params


def load_diffusers(path: str) -> tuple[dict, dict]:
    """(config dict as in config.json, Flax params) of a diffusers AutoencoderKL or VQModel at `path` (a model
    directory, its config.json, or a weights file with config.json beside it). Apply the params with
    `model_from_config(config).apply({"params": params}, ...)`."""
    config_path, weights_path = resolve(path)
    config = read_config(config_path)
    model = model_from_config(config, config_path)
    return config, params_from_state_dict(model, read_state_dict(weights_path), weights_path)
