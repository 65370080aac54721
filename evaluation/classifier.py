"""Small CNNs trained on the embedded datasets (the 8x8 digits, the 28x28 MNIST), whose 64-d penultimate layer is
the feature space of FID and KID for that dataset (InceptionV3 sees 299x299 RGB photographs; on 8x8 or 28x28 digits
its features say little).

Their weights are committed (evaluation/weights/, 0.6 MB and 1.9 MB), each with the content hash it must have
(NETWORKS): that hash names the feature space in every record, and every machine scores in the same space. Training
is deterministic only within one setting (fixed init key, fixed data order, one device, float32): XLA's CPU code
differs between processors, and on one processor with the XLA device count and optimisation level, so each setting
trains another network, and FIDs of two of them do not compare (docs/evaluation.md#the-classifiers-weights). The
committed ones were trained by the command below with XLA_FLAGS unset (one CPU device). A recipe other than the
committed one is trained once and cached, keyed by a hash of the recipe, under config.eval.fid.classifier_cache
(default ~/.cache/adaptive-timesteps); its own content hash then names its space. The test accuracy is stored with
the weights and reported next to every FID.

    python -m evaluation.classifier --dataset=mnist   # trains one and writes it to evaluation/weights/"""

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
    """Where a classifier trained from the recipe is cached: keyed by the recipe, the training data's content hash
    and what its training is deterministic only within (library versions, processor, XLA flags), so that a cache
    shared by two machines or settings never hands one's network to the other."""
    from core import fingerprint

    (xtr, ytr), _ = dataset_arrays(dataset)
    env = fingerprint.machine()
    key = dict(
        recipe=RECIPES[dataset],
        data=fingerprint.of_arrays(xtr, ytr),
        **{k: env[k] for k in ("versions", "processor", "platform", "xla_flags")},
    )
    digest = fingerprint.of_fields(key)[:12]
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


WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights")
# the content hash (network_fingerprint) of each committed classifier: a file that does not give it is refused
NETWORKS = dict(digits="b496c66ef4783dee", mnist="1db88e654d3455a9")


class DamagedWeights(RuntimeError):
    """A committed classifier whose contents are not the ones recorded in NETWORKS."""


def network_fingerprint(params, scale) -> str:
    """The content hash of a classifier: its weights and the feature scale its features are divided by."""
    from core import fingerprint

    return fingerprint.of_arrays(*jax.tree.leaves(params), np.float64(scale))


def committed_path(dataset: str) -> str:
    return os.path.join(WEIGHTS, f"{dataset}_classifier.npz")


def save(path: str, params, acc: float, scale: float, dataset: str):
    """Write a classifier's weights, test accuracy, feature scale and recipe (atomically)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    leaves = {f"p{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(params))}
    np.savez(tmp, test_accuracy=acc, scale=scale, recipe=json.dumps(RECIPES[dataset], sort_keys=True), **leaves)
    os.replace(tmp, path)  # concurrent writers (test workers, processes) write the same bytes


def _read(path: str, dataset: str):
    """(params, test accuracy, scale) stored in `path`, or None when they are not this recipe's shapes."""
    shape = dataset_arrays(dataset)[0][0].shape[1:]
    template = jax.eval_shape(lambda: make_net(dataset).init(jax.random.PRNGKey(0), jnp.zeros((1, *shape), jnp.uint8)))
    leaves, treedef = jax.tree.flatten(template)
    with np.load(path) as z:
        if "recipe" in z.files and json.loads(str(z["recipe"])) != json.loads(json.dumps(RECIPES[dataset])):
            return None
        stored = [z[f"p{i}"] if f"p{i}" in z.files else None for i in range(len(leaves))]
        if not all(a is not None and a.shape == leaf.shape for a, leaf in zip(stored, leaves)):
            return None
        return jax.tree.unflatten(treedef, stored), float(z["test_accuracy"]), float(z["scale"])


def load_or_train(cache_dir: str = "", dataset: str = "digits"):
    """(params, test accuracy, feature scale, where from): the committed classifier of this recipe; else the one
    cached for it, or trained once and cached. A committed file whose contents are not the ones recorded in
    NETWORKS raises DamagedWeights naming it."""
    path = committed_path(dataset)
    if os.path.exists(path):
        found = _read(path, dataset)
        if found is not None:
            got = network_fingerprint(found[0], found[2])
            if got != NETWORKS[dataset]:
                raise DamagedWeights(
                    f"{os.path.relpath(path)} holds a network of content hash {got}, not the committed "
                    f"{NETWORKS[dataset]}: restore it with git (git checkout -- {os.path.relpath(path)})"
                )
            return (*found, f"committed: {os.path.relpath(path, os.path.dirname(os.path.dirname(WEIGHTS)))}")
    path = cache_path(cache_dir, dataset)
    if os.path.exists(path):
        found = _read(path, dataset)
        if found is not None:
            return (*found, f"cached: {os.path.basename(path)} (trained from its recipe)")
    params, acc, scale = train_classifier(dataset)
    save(path, params, acc, scale, dataset)
    return params, acc, scale, f"trained on this machine and cached as {os.path.basename(path)}"


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


def main():
    import argparse

    ap = argparse.ArgumentParser(description="Train an embedded dataset's FID classifier and write it (its hash).")
    ap.add_argument("--dataset", choices=sorted(RECIPES), required=True)
    ap.add_argument(
        "--output", default="", help=f"the .npz to write (default {os.path.relpath(WEIGHTS)}/DATASET_classifier.npz)"
    )
    args = ap.parse_args()
    params, acc, scale = train_classifier(args.dataset)
    path = args.output or committed_path(args.dataset)
    save(path, params, acc, scale, args.dataset)
    print(
        f"{args.dataset} classifier: test accuracy {acc:.4f}, content hash {network_fingerprint(params, scale)}: {path}"
    )


if __name__ == "__main__":
    main()
