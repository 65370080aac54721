"""The embedded first stage: a small KL autoencoder (diffusers' AutoencoderKL architecture) that the project trains
once on the embedded MNIST's training split and caches as an ordinary diffusers model directory (config.json +
diffusion_pytorch_model.safetensors, loadable by diffusers itself), so that latent diffusion runs offline end to end.

    python -m data.embedded_autoencoder            # trains (about 2 minutes on 2 CPU cores) or finds the cached copy

config.autoencoder.path = "embedded:mnist" names it. The recipe (below) is hashed into the directory name: a change
trains a new one. Training is deterministic on one device: fixed init key, fixed data order, float32. The loss is
the per-pixel MSE of the reconstruction from a posterior sample plus KL_WEIGHT times the posterior's KL to N(0, I)
per latent element (a small weight, as LDM's KL autoencoders: the latents stay informative and roughly unit-scale).
The scaling factor written into config.json is 1 / std of the training latents (posterior means), LDM's recipe
(Rombach et al. 2022, appendix: "rescale the latent space by the component-wise standard deviation").
"""

import hashlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

EMBEDDED = {"embedded:mnist"}

RECIPE = dict(
    version=1,
    block_out_channels=(16, 32, 32),  # f4: 28x28x1 -> 7x7x4; 242k parameters
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=8,
    steps=800,
    batch=32,
    lr=1e-3,
    kl_weight=1e-4,
    init_seed=0,
    data_seed=0,
)


def diffusers_config(recipe=None, scaling_factor: float = 1.0) -> dict:
    recipe = recipe or RECIPE
    n = len(recipe["block_out_channels"])
    return {
        "_class_name": "AutoencoderKL",
        "act_fn": "silu",
        "block_out_channels": list(recipe["block_out_channels"]),
        "down_block_types": ["DownEncoderBlock2D"] * n,
        "up_block_types": ["UpDecoderBlock2D"] * n,
        "in_channels": 1,
        "out_channels": 1,
        "latent_channels": recipe["latent_channels"],
        "layers_per_block": recipe["layers_per_block"],
        "norm_num_groups": recipe["norm_num_groups"],
        "sample_size": 28,
        "scaling_factor": scaling_factor,
        "mid_block_add_attention": True,
        "use_quant_conv": True,
        "use_post_quant_conv": True,
    }


def cache_dir(cache: str = "", recipe=None) -> str:
    digest = hashlib.sha256(json.dumps(recipe or RECIPE, sort_keys=True).encode()).hexdigest()[:12]
    root = os.path.expanduser(cache or "~/.cache/adaptive-timesteps")
    return os.path.join(root, f"mnist_kl_autoencoder_{digest}")


def state_dict_from_params(params) -> dict:
    """diffusers state-dict (numpy, PyTorch layouts) of Flax params: latent/weights.py's mapping, inverted."""
    from latent.weights import _torch_key

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = tuple(p.key for p in path)
        a = np.asarray(leaf, np.float32)
        if names[-1] == "kernel" and a.ndim == 4:
            a = a.transpose(3, 2, 0, 1)
        elif names[-1] == "kernel" and a.ndim == 2:
            a = a.T
        out[_torch_key(names)] = np.ascontiguousarray(a)
    return out


def train(log=print, recipe=None):
    """(params, scaling factor, test MSE) of the embedded autoencoder, trained from scratch (`recipe`: RECIPE, or
    a cheaper one for tests)."""
    RECIPE = recipe or globals()["RECIPE"]
    import optax

    from data.mnist import mnist_arrays
    from latent.autoencoder_kl import AutoencoderKL, KLConfig

    (xtr, _), (xte, _) = mnist_arrays()
    to_x = lambda a: jnp.asarray(a, jnp.float32) / 127.5 - 1.0
    model = AutoencoderKL(KLConfig.from_diffusers(diffusers_config(RECIPE)))
    params = model.init(jax.random.PRNGKey(RECIPE["init_seed"]), to_x(xtr[:1]))["params"]
    tx = optax.adam(RECIPE["lr"])
    opt = tx.init(params)

    def loss_fn(p, x, key):
        mean, logvar = model.apply({"params": p}, x, method="encode")
        z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape)
        rec = model.apply({"params": p}, z, method="decode")
        kl = 0.5 * (mean**2 + jnp.exp(logvar) - 1.0 - logvar)
        return jnp.mean((rec - x) ** 2) + RECIPE["kl_weight"] * jnp.mean(kl)

    @jax.jit
    def step(p, o, x, key):
        loss, g = jax.value_and_grad(loss_fn)(p, x, key)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    rng, B = np.random.default_rng(RECIPE["data_seed"]), RECIPE["batch"]
    perm = np.array([], np.int64)
    for i in range(RECIPE["steps"]):
        if len(perm) < B:
            perm = np.concatenate([perm, rng.permutation(len(xtr))])
        idx, perm = perm[:B], perm[B:]
        params, opt, loss = step(params, opt, to_x(xtr[idx]), jax.random.PRNGKey(i))
        if (i + 1) % 200 == 0:
            log(f"embedded autoencoder: step {i + 1}/{RECIPE['steps']}, loss {float(loss):.5f}")
    enc = jax.jit(lambda p, x: model.apply({"params": p}, x, method="encode")[0])
    means = np.concatenate([np.asarray(enc(params, to_x(xtr[i : i + 500]))) for i in range(0, len(xtr), 500)])
    scale = float(1.0 / means.std())
    rec = jax.jit(lambda p, x: model.apply({"params": p}, x))
    test_mse = float(np.mean((np.asarray(rec(params, to_x(xte))) - np.asarray(to_x(xte))) ** 2))
    return params, scale, test_mse


def ensure(cache: str = "", log=print, recipe=None) -> str:
    """The cached embedded autoencoder's diffusers directory, trained and written (atomically) if absent."""
    from safetensors.numpy import save_file

    recipe = recipe or RECIPE
    path = cache_dir(cache, recipe)
    if os.path.isfile(os.path.join(path, "diffusion_pytorch_model.safetensors")):
        return path
    log(f"training the embedded MNIST autoencoder once (cached in {path}) ...")
    params, scale, test_mse = train(log, recipe)
    tmp = f"{path}.{os.getpid()}.tmp"
    os.makedirs(tmp, exist_ok=True)
    config = dict(diffusers_config(recipe, scaling_factor=scale), recipe=recipe, test_mse=test_mse)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(state_dict_from_params(params), os.path.join(tmp, "diffusion_pytorch_model.safetensors"))
    try:
        os.replace(tmp, path)
    except OSError:  # another process wrote it first: the same bytes
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    log(f"embedded autoencoder: scaling factor {scale:.4f}, test reconstruction MSE {test_mse:.5f} (in [-1, 1])")
    return path


def resolve(path: str, cache: str = "") -> str:
    """A config's autoencoder path: "embedded:mnist" -> the cached directory (trained if needed); else as given."""
    return ensure(cache) if path in EMBEDDED else path


if __name__ == "__main__":
    print(ensure())
