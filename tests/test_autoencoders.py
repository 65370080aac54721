"""The Flax first-stage autoencoders (latent/) against diffusers' own AutoencoderKL and VQModel.

The reference (tests/fixtures/autoencoder_reference.npz) and the weights (tests/fixtures/autoencoder_*_tiny*/) were
made by tests/fixtures/make_autoencoder_fixture.py with diffusers 0.42.1 on PyTorch 2.13.0 (CPU): tiny stand-ins of
the real configurations with random weights. Same weights in, same numbers out, to float32 round-off: every output is
within TOL times its own largest magnitude (seen: under 3e-6), the VQ code indices are equal. No torch or diffusers
is needed here.
"""

import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
KL = os.path.join(FIX, "autoencoder_kl_tiny")
KL_LEGACY = os.path.join(FIX, "autoencoder_kl_tiny_legacy")
VQ = os.path.join(FIX, "autoencoder_vq_tiny")
WEIGHTS = "diffusion_pytorch_model.safetensors"
TOL = 1e-5  # relative to the output's scale (max |diffusers' output|)


@pytest.fixture(scope="module")
def ref():
    with np.load(os.path.join(FIX, "autoencoder_reference.npz")) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def kl_params():
    from latent.weights import load_diffusers

    return load_diffusers(KL)


def apply(model, method="__call__"):
    """model.apply(variables, *args) for one method, compiled once (op-by-op dispatch is slower here)."""
    return jax.jit(lambda v, *args: model.apply(v, *args, method=method))


def close(ours, theirs, what):
    ours = np.asarray(ours)
    assert ours.shape == theirs.shape, what
    assert theirs.std() > 0.1 * np.abs(theirs).max(), what  # the stand-in weights give non-trivial outputs
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL * np.abs(theirs).max(), err_msg=what)


def test_kl_matches_diffusers(ref, kl_params):
    from latent.weights import model_from_config

    config, params = kl_params
    model, v = model_from_config(config), {"params": params}
    mean, logvar = apply(model, "encode")(v, ref["kl_x"])
    close(mean, ref["kl_mean"], "posterior mean")
    close(logvar, ref["kl_logvar"], "posterior logvar")
    close(apply(model, "decode")(v, ref["kl_z"]), ref["kl_decoded"], "decode")
    close(apply(model)(v, ref["kl_x"]), ref["kl_reconstruction"], "reconstruction")
    key = jax.random.key(3)
    sample = apply(model, "sample")(v, ref["kl_x"], key)
    eps = np.asarray(jax.random.normal(key, mean.shape))
    close(sample, ref["kl_mean"] + np.exp(0.5 * ref["kl_logvar"]) * eps, "posterior sample")


@pytest.mark.parametrize(
    "path",
    [
        KL_LEGACY,  # a .bin directory, legacy attention names (query / key / value / proj_attn)
        os.path.join(KL_LEGACY, "diffusion_pytorch_model.bin"),  # a weights file with config.json beside it
        os.path.join(KL, WEIGHTS),
        os.path.join(KL, "config.json"),
    ],
    ids=["bin_dir", "bin_file", "safetensors_file", "config_json"],
)
def test_kl_other_paths_give_the_same_params(path, kl_params):
    from latent.weights import load_diffusers

    config, params = kl_params
    config2, params2 = load_diffusers(path)
    assert config2 == config
    assert jax.tree.structure(params2) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params2), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)


def test_vq_matches_diffusers(ref):
    from latent.weights import load_diffusers, model_from_config

    config, params = load_diffusers(VQ)
    model, v = model_from_config(config), {"params": params}
    close(apply(model, "encode")(v, ref["vq_x"]), ref["vq_h"], "pre-quantisation latent")
    z_q, indices, loss = apply(model, "quantize_latents")(v, ref["vq_h"])
    np.testing.assert_array_equal(indices, ref["vq_indices"])
    assert len(np.unique(ref["vq_indices"])) > 4  # several codes in use
    close(z_q, ref["vq_quantized"], "quantised latent")
    np.testing.assert_allclose(loss, ref["vq_commit_loss"], rtol=1e-5)
    decode = apply(model, "decode")
    close(decode(v, ref["vq_h"]), ref["vq_decoded"], "decode (quantised)")
    nq = jax.jit(lambda v, h: model.apply(v, h, force_not_quantize=True, method="decode"))(v, ref["vq_h"])
    close(nq, ref["vq_decoded_not_quantized"], "decode (force_not_quantize)")
    close(apply(model)(v, ref["vq_x"]), ref["vq_reconstruction"], "reconstruction")


def test_make_autoencoder_kl_scales(ref):
    from latent import make_autoencoder

    ae = make_autoencoder(KL)
    assert (ae.kind, ae.scaling_factor, ae.downsample_factor) == ("kl", 0.18215, 2)
    assert ae.latent_shape(ref["kl_x"].shape) == ref["kl_mean"].shape == (2, 8, 12, 4)
    close(ae.encode(ref["kl_x"]), 0.18215 * ref["kl_mean"], "encode: scaled mean")
    key = jax.random.key(0)
    eps = np.asarray(jax.random.normal(key, ref["kl_mean"].shape))
    sample = 0.18215 * (ref["kl_mean"] + np.exp(0.5 * ref["kl_logvar"]) * eps)
    close(ae.encode(ref["kl_x"], key), sample, "encode: scaled sample")
    close(ae.decode(0.18215 * ref["kl_z"]), np.clip(ref["kl_decoded"], -1, 1), "decode: unscaled, clipped")
    with pytest.raises(ValueError, match="16x25 is not a multiple of the autoencoder's downsampling factor 2"):
        ae.latent_shape((16, 25, 3))


def test_make_autoencoder_vq_scales(ref):
    from latent import make_autoencoder

    ae = make_autoencoder(VQ)  # the config says 0.18215 (diffusers' default); the LDM's VQ-f4 uses 1.0
    assert (ae.kind, ae.scaling_factor, ae.downsample_factor, ae.latent_channels) == ("vq", 1.0, 4, 4)
    close(ae.encode(ref["vq_x"]), ref["vq_h"], "encode")
    ae = make_autoencoder(VQ, scaling_factor=0.5)
    assert ae.latent_shape((16, 24, 3)) == (4, 6, 4)
    close(ae.encode(ref["vq_x"], jax.random.key(0)), 0.5 * ref["vq_h"], "encode: scaled, key unused")
    close(ae.decode(0.5 * ref["vq_h"]), np.clip(ref["vq_decoded"], -1, 1), "decode: unscaled, quantised, clipped")


@pytest.mark.parametrize(
    "config, size, latent, count",
    [
        (
            dict(_class_name="AutoencoderKL", block_out_channels=[128, 256, 512, 512], layers_per_block=2),
            256,
            32,
            83653863,
        ),
        (
            dict(_class_name="VQModel", block_out_channels=[128, 256, 512], layers_per_block=2, num_vq_embeddings=8192),
            256,
            64,
            55322782,
        ),
    ],
    ids=["sd_vae_f8", "ldm_vq_f4"],
)
def test_full_size_configs(config, size, latent, count):
    """sd-vae-ft-* and ldm-celebahq-256's vqvae (their config.json fields that differ from diffusers' defaults): the
    parameter counts of diffusers' modules, the latent sizes of 256x256 images (shapes only, nothing computed)."""
    import jax.numpy as jnp

    from latent.weights import model_from_config

    n = len(config["block_out_channels"])
    config = dict(config, down_block_types=["DownEncoderBlock2D"] * n, up_block_types=["UpDecoderBlock2D"] * n)
    model = model_from_config(config)
    x = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), x)
    assert sum(int(np.prod(p.shape)) for p in jax.tree.leaves(variables)) == count
    z = jax.eval_shape(lambda v, x: model.apply(v, x, method="encode"), variables, x)
    z = z[0] if isinstance(z, tuple) else z
    assert z.shape == (1, latent, latent, 4 if "num_vq_embeddings" not in config else 3)


def _copy(tmp_path, src=KL):
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    return dst


def _edit_weights(dst, edit):
    sd = load_file(dst / WEIGHTS)
    edit(sd)
    save_file(sd, dst / WEIGHTS)


def _edit_config(dst, **changes):
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))


def _error(path, kind):
    from latent.weights import load_diffusers

    with pytest.raises(kind) as info:
        load_diffusers(str(path))
    assert "\n" not in str(info.value)
    return str(info.value)


def test_errors_name_the_problem(tmp_path):
    assert "no such file or directory" in _error(tmp_path / "absent", FileNotFoundError)

    (tmp_path / "lone").mkdir()
    shutil.copy(os.path.join(KL, WEIGHTS), tmp_path / "lone")
    assert "config.json not found" in _error(tmp_path / "lone" / WEIGHTS, FileNotFoundError)
    assert "config.json not found" in _error(tmp_path / "lone", FileNotFoundError)

    dst = _copy(tmp_path)
    os.remove(dst / WEIGHTS)
    assert "has no diffusion_pytorch_model.safetensors or diffusion_pytorch_model.bin" in _error(dst, FileNotFoundError)
    shutil.rmtree(dst)

    dst = _copy(tmp_path)
    _edit_weights(dst, lambda sd: sd.pop("decoder.conv_in.weight"))
    msg = _error(dst, ValueError)
    assert "has no 'decoder.conv_in.weight', which the config needs (shape (12, 4, 3, 3))" in msg

    _edit_weights(dst, lambda sd: sd.update({"decoder.conv_in.weight": np.zeros((12, 5, 3, 3), np.float32)}))
    msg = _error(dst, ValueError)
    assert "'decoder.conv_in.weight' has shape (12, 5, 3, 3), the config needs (12, 4, 3, 3)" in msg

    _edit_weights(dst, lambda sd: sd.update({"decoder.conv_in.weight": np.zeros((12, 4, 3, 3), np.float32)}))
    _edit_weights(dst, lambda sd: sd.update({"encoder.extra.weight": np.zeros(3, np.float32)}))
    assert "has an unexpected key 'encoder.extra.weight'" in _error(dst, ValueError)

    _edit_config(dst, down_block_types=["DownEncoderBlock2D", "AttnDownEncoderBlock2D"])
    msg = _error(dst, ValueError)
    assert "unsupported down_block_types entry 'AttnDownEncoderBlock2D' (only DownEncoderBlock2D is ported)" in msg

    _edit_config(dst, _class_name="AutoencoderTiny")
    assert "unsupported model class 'AutoencoderTiny'" in _error(dst, ValueError)

    dst = tmp_path / "vq"
    shutil.copytree(VQ, dst)
    _edit_config(dst, norm_type="spatial")
    assert "unsupported norm_type 'spatial'" in _error(dst, ValueError)
