"""The variance ceiling's estimator (benchmarks/variance_ceiling.py) on tables computed by hand: no training."""

import numpy as np
import pytest

from benchmarks.variance_ceiling import fit, mean_gradient_sq, moments, second_moment, steps_model, strata, summary


def test_a_table_constant_over_images_has_the_closed_form_optimum():
    # G[n, k] = c_k for every image: p* proportional to a_k sqrt(c_k), M(p*) = (sum_k a_k sqrt(c_k))^2, and an
    # image has nothing to add (per-image = marginal); uniform's M is sum_k a_k c_k.
    a = np.array([0.1, 0.2, 0.3, 0.4])
    c = np.array([16.0, 1.0, 4.0, 0.25])
    G = np.broadcast_to(c, (2, 5, 4)).copy()
    M = moments(G, G, a, None, floor=0.0, cross=False)
    assert M["uniform"] == pytest.approx(np.sum(a * c))
    assert M["best marginal"] == pytest.approx(np.sum(a * np.sqrt(c)) ** 2)
    assert M["best per image"] == pytest.approx(M["best marginal"])
    pi = fit("best marginal", G, G, a, floor=0.0)
    assert pi == pytest.approx(a * np.sqrt(c) / np.sum(a * np.sqrt(c)))
    # cross-fitting changes nothing when every draw is the same
    assert moments(G, G, a, None, floor=0.0, cross=True)["best per image"] == pytest.approx(M["best per image"])


def test_two_images_two_strata_by_hand():
    a = np.array([0.5, 0.5])
    G = np.array([[[1.0, 9.0], [4.0, 0.0]]])  # [R=1, N=2, K=2]
    L = np.array([[[1.0, 3.0], [2.0, 2.0]]])
    M = moments(G, L, a, np.full(G.shape, 2.0), floor=0.0, cross=False)
    assert M["uniform"] == pytest.approx(((0.5 + 4.5) + (2.0 + 0.0)) / 2)  # mean_n sum_k a_k G
    assert M["schedule"] == pytest.approx(3.5 / 2)  # rho = 2 everywhere halves it
    assert M["best marginal"] == pytest.approx((0.5 * np.sqrt(2.5) + 0.5 * np.sqrt(4.5)) ** 2)
    assert M["best per image"] == pytest.approx(((0.5 * 1 + 0.5 * 3) ** 2 + (0.5 * 2 + 0.0) ** 2) / 2)
    # loss mean: pi proportional to a_k mean_n L = (0.75, 1.25) / 2: M = mean_n sum_k a_k^2 G / pi
    pi = np.array([1.5, 2.5]) / 4.0
    assert M["loss mean"] == pytest.approx(np.mean(np.sum(a**2 * G[0] / pi, axis=1)))


@pytest.mark.parametrize("seed", range(5))
def test_per_image_below_marginal_below_every_marginal_proposal_on_any_table(seed):
    rng = np.random.default_rng(seed)
    R, N, K = 2, 7, 6
    a = rng.dirichlet(np.ones(K))
    G = rng.lognormal(0.0, 2.0, (R, N, K))
    L = rng.lognormal(0.0, 1.0, (R, N, K))
    M = moments(G, L, a, rng.uniform(0.2, 3.0, (R, N, K)), floor=0.0, cross=False)
    assert M["best per image"] <= M["best marginal"] * (1 + 1e-12)
    for name in ("uniform", "loss mean", "loss second moment"):
        assert M["best marginal"] <= M[name] * (1 + 1e-12)
    assert M["best per image"] <= M["loss per image"] * (1 + 1e-12)


def test_the_estimator_is_unbiased_for_the_exact_second_moment_on_a_small_chain():
    # T = 6 steps in strata {0}, {1, 2}, {3, 4, 5}; E over the stratified draw of a_k G(t_k) / rho(t_k) is
    # (1/T) sum_t G(t) / rho(t), the exact second moment under p = rho / T.
    T, sizes = 6, np.array([1, 2, 3])
    a = sizes / T
    g2 = np.array([5.0, 1.0, 2.0, 0.5, 0.1, 3.0])
    p = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.2])
    rho = T * p
    exact = np.sum((1.0 / T) ** 2 * g2 / p)
    draws = [(t0, t1, t2) for t0 in (0,) for t1 in (1, 2) for t2 in (3, 4, 5)]  # every draw, equally likely
    est = [second_moment(g2[list(d)][None, None], a, rho[list(d)][None, None]) for d in draws]
    assert np.mean(est) == pytest.approx(exact)


def test_mean_gradient_u_statistic_by_hand():
    h = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # ordered pairs i != j: h1.h2 = 0, h1.h3 = 1, h2.h3 = 1 -> 2 * 2 / 6
    assert mean_gradient_sq(h @ h.T) == pytest.approx(2.0 / 3.0)


def test_variance_parts_subtract_the_same_mean_gradient():
    a = np.array([0.5, 0.5])
    G = np.array([[[1.0, 9.0], [4.0, 1.0]]])
    h = np.array([[0.5, 0.0], [0.5, 1.0]])
    s = summary(G, G, a, None, h @ h.T, floor=0.0, cross=False)
    assert s["mean_grad_sq"] == pytest.approx(0.25)
    for k, m in s["M"].items():
        assert s["V"][k] == pytest.approx(m - 0.25)


def test_steps_model_limits():
    assert steps_model(1.0, 500.0, 128) == pytest.approx(1.0)
    assert steps_model(2.0, 1e9, 128) == pytest.approx(0.5, rel=1e-6)  # noise-dominated: steps / r
    assert steps_model(2.0, 1e-9, 128) == pytest.approx(1.0, rel=1e-6)  # curvature-dominated: nothing


def test_geometric_strata_of_a_chain_cover_every_step_once():
    from configs.default import get_config
    from diffusion import make_process

    process = make_process(get_config().diffusion)
    lo, size, a = strata(process, 32, "geometric")
    T = process.time.size
    assert lo[0] == 0 and size[0] == 1 and np.all(size >= 1)
    assert np.all(lo[1:] == lo[:-1] + size[:-1]) and lo[-1] + size[-1] == T
    assert a.sum() == pytest.approx(1.0)


def test_mean_gradient_of_a_bootstrap_resample_leaves_out_pairs_of_one_image():
    h = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # rows 0 and 1: two copies of one image
    assert mean_gradient_sq(h @ h.T) == pytest.approx(2.0 / 6.0)
    assert mean_gradient_sq(h @ h.T, ids=np.array([0, 0, 1])) == pytest.approx(0.0)
