"""The Flax FID InceptionV3 against pytorch-fid's own module, and the torch-free reader of torch.save files.

The reference (tests/fixtures/inception_reference.npz) was made by tests/fixtures/make_inception_fixture.py with
PyTorch 2.14.1 and pytorch-fid 0.3.0: their InceptionV3 with stand-in weights (the real file cannot be fetched here)
on uint8 images of two shapes (CIFAR's 32x32 RGB, the digits' 8x8 grey), both resized up to 299x299. Same weights
in, same 2048 features out, or a layer, a pool, the resize or the input scaling differs from pytorch-fid's.
"""

import json
import os
import sys

import numpy as np
import pytest

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
sys.path.insert(0, FIX)
from inception_formula import stand_in_images, stand_in_state_dict  # noqa: E402


@pytest.fixture(scope="module")
def reference():
    with np.load(os.path.join(FIX, "inception_reference.npz")) as z:
        return {k: z[k] for k in z.files}


def test_features_match_pytorch_fid(reference):
    from evaluation import inception

    names = {k: tuple(v) for k, v in json.loads(str(reference["names"])).items()}
    variables = inception.variables_from_state_dict(stand_in_state_dict(names))
    # every array of the file is used, but the 1008-way classifier and batch norm's step counters
    used = {k for k in names if not k.startswith("fc.") and not k.endswith("num_batches_tracked")}
    import jax

    assert sum(1 for _ in jax.tree.leaves(variables)) == len(used)
    features = inception.make_feature_fn(variables)
    for key, images in stand_in_images().items():
        ours, theirs = features(images), reference[key].astype(np.float64)
        assert ours.shape == theirs.shape == (len(images), 2048)
        assert theirs.std() > 0.05  # the stand-in weights give non-trivial features
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * np.abs(theirs).max(), err_msg=key)


def test_wrong_weights_file_is_named():
    from evaluation import inception

    with pytest.raises(ValueError, match="the weights file has no .Conv2d_1a_3x3"):
        inception.variables_from_state_dict({"conv.weight": np.zeros((3, 3))})


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_torch_file_reader(fmt):
    from core.torch_file import load_state_dict

    sd = load_state_dict(os.path.join(FIX, f"torch_file_{fmt}.pth"))
    with np.load(os.path.join(FIX, "torch_file_expected.npz")) as z:
        assert list(sd) == list(z.files)
        for k in z.files:
            assert sd[k].dtype == z[k].dtype and sd[k].shape == z[k].shape, k
            np.testing.assert_array_equal(sd[k], z[k], err_msg=k)


@pytest.mark.slow  # over 20 s: CI's second job
def test_reference_statistics_and_the_inception_feature_space(tmp_path, reference):
    """evaluation.reference's statistics, then the feature space of config.eval.fid.features=inception, on the
    stand-in weights (as an .npz of pytorch-fid's names): the numbers equal the Inception features computed here."""
    import subprocess

    from conftest import main_cmd, tiny_config, tiny_flags
    from data import digits_arrays
    from evaluation import frechet
    from evaluation.features import make_feature_space
    from evaluation.reference import write_reference

    names = {k: tuple(v) for k, v in json.loads(str(reference["names"])).items()}
    weights = tmp_path / "stand_in.npz"
    np.savez(weights, **stand_in_state_dict(names))
    stats = tmp_path / "digits_train.npz"
    write_reference(tiny_config(**{"eval.fid.inception_weights": str(weights)}), str(stats), max_images=4)
    with pytest.raises(FileExistsError, match="exists; not overwriting it"):  # never overwritten
        write_reference(tiny_config(**{"eval.fid.inception_weights": str(weights)}), str(stats))
    # the feature space --mode=eval builds from these files (its record's wiring is tests/test_eval.py's)
    c = tiny_config(
        **{
            "eval.fid.features": "inception",
            "eval.fid.inception_weights": str(weights),
            "eval.fid.reference_stats": str(stats),
            "eval.fid.kid_subsets": 3,
        }
    )
    space = make_feature_space(c)
    assert space.name == "inception_v3_pool3" and space.protocol["weights"] == "stand_in.npz"  # a name, not a path
    from core import fingerprint

    assert space.fingerprint["network"] == fingerprint.of_file(str(weights))  # its bytes, wherever the file lies
    with np.load(stats) as z:
        assert space.fingerprint["reference"] == fingerprint.of_arrays(z["mu"], z["sigma"], z["features"])
    features = space.features  # the Flax Inception on the weights file (checked against pytorch-fid above)
    (train, _), (test, _) = digits_arrays()
    with np.load(stats) as z:
        assert (z["dataset"].item(), int(z["image_size"]), int(z["num_images"])) == ("digits", 8, 4)
        ours = features(train[:4])
        mu, sigma = frechet.statistics(ours)
        np.testing.assert_allclose(z["mu"], mu, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(z["features"], ours, rtol=1e-6)
    real = features(test[:4])
    scores = space.score(test[:4], 3, 1000)
    np.testing.assert_allclose(scores["fid"], frechet.frechet_distance(*frechet.statistics(real), mu, sigma), rtol=1e-9)
    np.testing.assert_allclose(scores["kid"], frechet.kid(real, ours, 3, 1000)[0], rtol=1e-9)

    # statistics of another dataset: one line before anything runs
    other = tmp_path / "cifar.npz"
    np.savez(other, mu=np.zeros(2048), sigma=np.eye(2048), dataset="cifar10", image_size=32)
    r = subprocess.run(
        main_cmd(
            "--mode=eval",
            f"--workdir={tmp_path}/run",
            *tiny_flags(),
            f"--config.eval.fid.inception_weights={weights}",
            "--config.eval.fid.features=inception",
            f"--config.eval.fid.reference_stats={other}",
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
    assert "config.eval.fid.reference_stats=" in err[0] and "was made for dataset 'cifar10'" in err[0]
