"""Small CNNs trained on the embedded datasets (the 8x8 digits, the 28x28 MNIST), whose 64-d penultimate layer is
the feature space of FID and KID for that dataset (InceptionV3 sees 299x299 RGB photographs; on 8x8 or 28x28 digits
its features say little).

Each is trained deterministically (fixed init key, fixed data order, one device, float32) on its dataset's training
split and cached, keyed by a hash of everything that defines it, under config.eval.fid.classifier_cache (default
~/.cache/adaptive-timesteps). Its accuracy on the test split is stored with it and reported next to every FID.
"""

import hashlib
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Everything that defines each classifier; a change gives a new cache file. conv: channels of 3x3 convolutions, the
# first with stride 1, the others stride 2.
RECIPE = dict(version=1, conv=(32, 64), hidden=(128, 64), epochs=40, batch=100, lr=1e-3, init_seed=0, data_seed=0)
RECIPES = dict(
    digits=RECIPE,
    mnist=dict(version=1, conv=(32, 64, 64), hidden=(128, 64), epochs=8, batch=100, lr=1e-3, init_seed=0, data_seed=0),
)
FEATURE_DIM = RECIPE["hidden"][-1]
DATASET_OF = dict(digits="digits", digits_tfds="digits", mnist="mnist")  # config.data.name -> classifier


def dataset_arrays(dataset: str):
    """((train images, labels), (test images, labels)) of an embedded dataset."""
    if dataset == "digits":
        from data.digits import digits_arrays

        return digits_arrays()
    from data.mnist import mnist_arrays

    return mnist_arrays()


class DigitsNet(nn.Module):
    recipe: tuple = tuple(RECIPE["conv"]), tuple(RECIPE["hidden"])

    @nn.compact
    def __call__(self, x, features_only=False):
        x = x.astype(jnp.float32) / 127.5 - 1.0
        conv, hidden = self.recipe
        for i, c in enumerate(conv):
            x = nn.relu(nn.Conv(c, (3, 3), strides=(1, 1) if i == 0 else (2, 2))(x))
        x = x.reshape(x.shape[0], -1)
        for h in hidden:
            x = nn.relu(nn.Dense(h)(x))
        if features_only:
            return x
        return nn.Dense(10)(x)


def make_net(dataset: str = "digits") -> DigitsNet:
    r = RECIPES[dataset]
    return DigitsNet((tuple(r["conv"]), tuple(r["hidden"])))


def cache_path(cache_dir: str, dataset: str = "digits") -> str:
    digest = hashlib.sha256(json.dumps(RECIPES[dataset], sort_keys=True).encode()).hexdigest()[:12]
    cache_dir = os.path.expanduser(cache_dir or "~/.cache/adaptive-timesteps")
    return os.path.join(cache_dir, f"{dataset}_classifier_{digest}.npz")


def train_classifier(dataset: str = "digits"):
    """(params, test accuracy, feature scale) of the dataset's classifier, trained from scratch (seconds on a CPU
    for the digits, about a minute for MNIST)."""
    import optax

    RECIPE = RECIPES[dataset]
    (xtr, ytr), (xte, yte) = dataset_arrays(dataset)
    net = make_net(dataset)
    params = net.init(jax.random.PRNGKey(RECIPE["init_seed"]), xtr[:1])
    tx = optax.adam(RECIPE["lr"])
    opt = tx.init(params)

    @jax.jit
    def step(params, opt, x, y):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, x), y).mean()

        grads = jax.grad(loss_fn)(params)
        upd, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, upd), opt

    B, rng = RECIPE["batch"], np.random.default_rng(RECIPE["data_seed"])
    for _ in range(RECIPE["epochs"]):
        perm = rng.permutation(len(xtr))
        for i in range(0, len(xtr) - B + 1, B):
            params, opt = step(params, opt, xtr[perm[i : i + B]], ytr[perm[i : i + B]])
    acc = float((np.asarray(jax.jit(net.apply)(params, xte)).argmax(-1) == yte).mean())
    h = np.asarray(jax.jit(lambda p, x: net.apply(p, x, features_only=True))(params, xtr), np.float64)
    return params, acc, float(np.sqrt(np.mean(h**2)))


def load_or_train(cache_dir: str = "", dataset: str = "digits"):
    """(params, test accuracy, feature scale), from the cache or trained once and cached (written atomically)."""
    path = cache_path(cache_dir, dataset)
    shape = dataset_arrays(dataset)[0][0].shape[1:]
    template = jax.eval_shape(lambda: make_net(dataset).init(jax.random.PRNGKey(0), jnp.zeros((1, *shape), jnp.uint8)))
    leaves, treedef = jax.tree.flatten(template)
    if os.path.exists(path):
        with np.load(path) as z:
            stored = [z[f"p{i}"] for i in range(len(leaves))]
            if all(a.shape == leaf.shape for a, leaf in zip(stored, leaves)):
                return jax.tree.unflatten(treedef, stored), float(z["test_accuracy"]), float(z["scale"])
    params, acc, scale = train_classifier(dataset)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(
        tmp, test_accuracy=acc, scale=scale, **{f"p{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(params))}
    )
    os.replace(tmp, path)  # concurrent writers (test workers, processes) write the same bytes
    return params, acc, scale


def make_feature_fn(params, scale, dataset: str = "digits"):
    """features(images_u8 [N, H, W, 1], tick=None) -> float64 [N, 64]; tick(n) after each batch of n images."""
    net = make_net(dataset)
    fn = jax.jit(lambda p, x: net.apply(p, x, features_only=True))
    params = jax.device_put(params, jax.local_devices()[0])

    def features(images_u8, batch=1000, tick=None):
        out = []
        for i in range(0, len(images_u8), batch):
            x = np.asarray(images_u8[i : i + batch])
            out.append(np.asarray(fn(params, jax.device_put(x, jax.local_devices()[0]))))
            if tick is not None:
                tick(len(x))
        return np.concatenate(out).astype(np.float64) / scale

    return features
