"""Frechet distance (FID) and kernel inception distance (KID) between two sets of features, in float64 NumPy.

FID (Heusel et al. 2017): ||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)), mu and S the mean and the unbiased
(N - 1) covariance of the features, as pytorch-fid. pytorch-fid takes scipy.linalg.sqrtm(S1 S2) and its real part;
here tr (S1 S2)^(1/2) = sum_i sqrt(lambda_i) with lambda_i the eigenvalues of the symmetric PSD matrix
S1^(1/2) S2 S1^(1/2) (similar to S1 S2), negative round-off clipped to 0: the same number, without sqrtm's complex
round-off on singular covariances. tests/test_fid.py checks it against the direct scipy formula.

KID (Binkowski et al. 2018), as torch-fidelity and clean-fid: the unbiased MMD^2 estimate with the cubic polynomial
kernel k(x, y) = (x . y / d + 1)^3, averaged over `num_subsets` random subsets of `subset_size` features drawn without
replacement from each set (subset_size is capped at the smaller set; subsets from np.random.default_rng(seed)).
Reported as the mean and the standard deviation over subsets. Unbiased: it can be slightly negative.
"""

import numpy as np


def statistics(features):
    """(mu [d], sigma [d, d]) of features [N, d] in float64; sigma with ddof=1 as pytorch-fid."""
    f = np.asarray(features, np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise ValueError(f"need at least 2 feature vectors [N, d], got shape {f.shape}")
    return f.mean(axis=0), np.cov(f, rowvar=False)


def _psd_sqrt(s):
    w, v = np.linalg.eigh((s + s.T) / 2)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != mu1.shape * 2:
        raise ValueError(
            f"feature statistics differ in dimension: mu {mu1.shape} vs {mu2.shape}, sigma {s1.shape} vs {s2.shape}"
        )
    r1 = _psd_sqrt(s1)
    m = r1 @ s2 @ r1
    tr_covmean = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0.0, None)).sum()
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)


def fid_from_features(f1, f2) -> float:
    return frechet_distance(*statistics(f1), *statistics(f2))


def _mmd2_unbiased(x, y):
    d = x.shape[1]
    m = x.shape[0]
    kxx = (x @ x.T / d + 1.0) ** 3
    kyy = (y @ y.T / d + 1.0) ** 3
    kxy = (x @ y.T / d + 1.0) ** 3
    return (
        (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
        + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2.0 * kxy.sum() / (m * m)
    )


def kid(f1, f2, num_subsets: int = 100, subset_size: int = 1000, seed: int = 0):
    """(mean, std) of the unbiased MMD^2 over subsets; subset_size is capped at min(len(f1), len(f2))."""
    f1, f2 = np.asarray(f1, np.float64), np.asarray(f2, np.float64)
    if f1.shape[1:] != f2.shape[1:]:
        raise ValueError(f"feature dimensions differ: {f1.shape} vs {f2.shape}")
    m = min(subset_size, len(f1), len(f2))
    if m < 2:
        raise ValueError(f"KID needs at least 2 features per set, got {len(f1)} and {len(f2)}")
    rng = np.random.default_rng(seed)
    vals = np.array(
        [
            _mmd2_unbiased(f1[rng.choice(len(f1), m, replace=False)], f2[rng.choice(len(f2), m, replace=False)])
            for _ in range(num_subsets)
        ]
    )
    return float(vals.mean()), float(vals.std()), m
