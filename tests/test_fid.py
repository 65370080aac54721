"""FID and KID against direct NumPy/SciPy computations and closed forms; the digits classifier's feature space."""

import os

import numpy as np
import pytest
import scipy.linalg

from evaluation import frechet


def direct_fid(f1, f2):
    """pytorch-fid's formula: scipy's sqrtm of S1 S2, real part."""
    mu1, mu2 = f1.mean(0), f2.mean(0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    covmean = scipy.linalg.sqrtm(s1 @ s2).real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


@pytest.mark.parametrize("n,d", [(400, 8), (300, 32)])
def test_fid_matches_scipy_sqrtm(n, d):
    rng = np.random.default_rng(d)
    a = rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + 0.5
    b = rng.standard_normal((n + 17, d)) @ rng.standard_normal((d, d)) * 0.7
    np.testing.assert_allclose(frechet.fid_from_features(a, b), direct_fid(a, b), rtol=1e-9)
    assert abs(frechet.fid_from_features(a, a)) < 1e-9


def test_fid_closed_forms():
    # diagonal covariances: ||mu1 - mu2||^2 + sum (sqrt(a_i) - sqrt(b_i))^2
    a, b = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    mu1, mu2 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    expected = 1.0 + 4.0 + ((1 - 3) ** 2 + (2 - 1) ** 2 + 0)
    assert frechet.frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expected, rel=1e-12)
    # rotating both distributions by the same orthogonal matrix changes nothing
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))
    assert frechet.frechet_distance(q @ mu1, q @ np.diag(a) @ q.T, q @ mu2, q @ np.diag(b) @ q.T) == pytest.approx(
        expected, rel=1e-10
    )


def test_fid_with_singular_covariances():
    # fewer samples than dimensions (periodic FID on few samples): rank-deficient S; scipy's sqrtm adds complex
    # round-off there, the eigenvalue form does not, and both agree on the value
    rng = np.random.default_rng(3)
    a, b = rng.random((12, 20)), rng.random((15, 20)) + 0.1
    np.testing.assert_allclose(frechet.fid_from_features(a, b), direct_fid(a, b), rtol=1e-6)


def direct_kid(f1, f2, num_subsets, m, seed):
    """The unbiased MMD^2 with the cubic kernel, pair by pair, over the same subsets."""
    rng = np.random.default_rng(seed)
    d = f1.shape[1]
    k = lambda x, y: (float(np.dot(x, y)) / d + 1.0) ** 3
    vals = []
    for _ in range(num_subsets):
        x = f1[rng.choice(len(f1), m, replace=False)]
        y = f2[rng.choice(len(f2), m, replace=False)]
        xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        yy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        xy = sum(k(x[i], y[j]) for i in range(m) for j in range(m)) / (m * m)
        vals.append(xx + yy - 2 * xy)
    return np.mean(vals), np.std(vals)


def test_kid_matches_pairwise_computation():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((40, 6)), rng.standard_normal((30, 6)) * 1.3 + 0.2
    mean, std, m = frechet.kid(a, b, num_subsets=5, subset_size=12, seed=7)
    dm, ds = direct_kid(a, b, 5, 12, 7)
    assert m == 12
    np.testing.assert_allclose([mean, std], [dm, ds], rtol=1e-10)
    # the subset size is capped at the smaller set
    assert frechet.kid(a, b, num_subsets=2, subset_size=1000)[2] == 30


def test_kid_is_unbiased_for_equal_distributions():
    # MMD^2 = 0 between one distribution and itself: the unbiased estimate averages to 0 (a biased one would not)
    rng = np.random.default_rng(2)
    vals = [
        frechet.kid(rng.standard_normal((50, 4)), rng.standard_normal((50, 4)), 20, 50, seed=i)[0] for i in range(40)
    ]
    assert abs(np.mean(vals)) < 4 * np.std(vals) / np.sqrt(len(vals))


def test_the_committed_digits_classifier_has_its_hash_and_separates_noise():
    """The committed classifiers load (no training) with the content hashes that name their feature spaces, their
    recipes the current ones; the digits classifier's features put the test split far closer to the reference than
    noise."""
    import json

    from data import digits_arrays
    from evaluation import classifier

    params, acc, scale, origin = classifier.load_or_train("", "digits")
    assert origin == "committed: evaluation/weights/digits_classifier.npz"
    assert classifier.network_fingerprint(params, scale) == classifier.NETWORKS["digits"] and acc > 0.95
    for dataset in ("digits", "mnist"):
        with np.load(classifier.committed_path(dataset)) as z:
            assert json.loads(str(z["recipe"])) == json.loads(json.dumps(classifier.RECIPES[dataset]))
    features = classifier.make_feature_fn(params, scale)
    (train, _), (test, _) = digits_arrays()
    ft = features(train)
    assert ft.shape == (1500, classifier.FEATURE_DIM)
    np.testing.assert_allclose(np.sqrt(np.mean(ft**2)), 1.0, rtol=1e-5)  # the fixed scale
    noise = np.random.default_rng(0).integers(0, 256, test.shape).astype(np.uint8)
    fid_test = frechet.fid_from_features(features(test), ft)
    fid_noise = frechet.fid_from_features(features(noise), ft)
    assert fid_test < 0.1 * fid_noise


def test_a_periodic_fid_measured_another_way_is_another_metric_name():
    """The tag in periodic/fid_N{N}/{tag} is the first 8 hex digits of the SHA-256 of the FID fingerprint's JSON with
    sorted keys: the same fields in any order give one name; another network, reference or decoder another."""
    import hashlib
    import json

    from evaluation.classifier import NETWORKS
    from evaluation.quality import fid_tag

    fp = dict(network=NETWORKS["digits"], reference="r1", reference_stats="s1")
    want = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:8]
    assert fid_tag(fp) == want and fid_tag(dict(reversed(fp.items()))) == want and len(want) == 8
    others = [dict(fp, network=NETWORKS["mnist"]), dict(fp, reference="r2"), dict(fp, decoder="a1")]
    assert len({want, *map(fid_tag, others)}) == 4


def test_a_committed_classifier_whose_contents_changed_is_refused(tmp_path, monkeypatch):
    import shutil

    from evaluation import classifier

    shutil.copy(classifier.committed_path("digits"), tmp_path / "digits_classifier.npz")
    monkeypatch.setattr(classifier, "WEIGHTS", str(tmp_path))
    with np.load(tmp_path / "digits_classifier.npz") as z:
        stored = {k: z[k] for k in z.files}
    stored["p0"] = stored["p0"] + np.float32(1e-7)  # one weight's last bits: another network
    np.savez(tmp_path / "digits_classifier.npz", **stored)
    with pytest.raises(classifier.DamagedWeights, match=r"holds a network of content hash [0-9a-f]{16}, not the "):
        classifier.load_or_train(str(tmp_path / "cache"), "digits")


def test_a_cached_classifier_is_keyed_by_what_its_training_is_deterministic_within(tmp_path, monkeypatch):
    """Training reproduces a network only within one setting: the cache of a trained classifier is a different
    file under other XLA flags (or versions, processor, training data), the same one under the same."""
    from evaluation import classifier

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    a = classifier.cache_path(str(tmp_path), "digits")
    assert classifier.cache_path(str(tmp_path), "digits") == a
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=2")
    b = classifier.cache_path(str(tmp_path), "digits")
    assert a != b and os.path.dirname(a) == os.path.dirname(b) == str(tmp_path)
    assert classifier.cache_path(str(tmp_path), "mnist") not in (a, b)


TRAIN_AND_HASH = """
import sys
sys.path.insert(0, {root!r})
from evaluation import classifier
classifier.WEIGHTS = {weights!r}  # nothing committed there: trained, then cached
params, acc, scale, origin = classifier.load_or_train({cache!r}, "digits")
print(origin.split()[0], classifier.network_fingerprint(params, scale))
"""


@pytest.mark.slow  # two trainings of the digits classifier in two processes, about 30 s each
def test_the_classifier_trained_twice_in_two_processes_has_one_hash(tmp_path):
    """Training is deterministic within a setting (the XLA flags these tests run with): two processes that train
    the digits classifier from scratch get the same network, and the one cached by the first is read back."""
    import subprocess
    import sys

    from conftest import ROOT
    from evaluation import classifier

    hashes = []
    for i in range(2):
        code = TRAIN_AND_HASH.format(root=ROOT, weights=str(tmp_path / "none"), cache=str(tmp_path / f"cache{i}"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        origin, digest = r.stdout.split()
        assert origin == "trained"
        hashes.append(digest)
    assert hashes[0] == hashes[1]
    cached = classifier.cache_path(str(tmp_path / "cache0"), "digits")
    assert cached.startswith(str(tmp_path))
    found = classifier._read(cached, "digits")
    assert classifier.network_fingerprint(found[0], found[2]) == hashes[0]
