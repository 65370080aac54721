import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from diffusion import DDPM, make_schedule
from diffusion import gaussian as g

S = make_schedule("linear", 1000)
P = DDPM(S, target="eps", variance="fixed_large")


def test_normal_kl_closed_form():
    # KL(N(0,1) || N(1,4)) = ln 2 + (1 + 1) / 8 - 1/2
    kl = g.normal_kl(0.0, 0.0, 1.0, math.log(4.0))
    assert float(kl) == pytest.approx(math.log(2) + 0.25 - 0.5, rel=1e-6)
    assert float(g.normal_kl(0.3, -1.0, 0.3, -1.0)) == pytest.approx(0.0, abs=1e-7)


def test_discretized_likelihood_against_exact_cdf():
    x = jnp.array([-1.0, -0.5, 0.0, 0.3, 1.0])
    means = jnp.array([-0.9, -0.45, 0.02, 0.3, 0.95])
    log_scales = jnp.log(jnp.array([0.1, 0.05, 0.02, 0.3, 0.2]))
    got = np.exp(np.asarray(g.discretized_gaussian_log_likelihood(x, means, log_scales)))
    sd = np.exp(np.asarray(log_scales))
    m, xx = np.asarray(means), np.asarray(x)
    exact = stats.norm.cdf((xx + 1 / 255 - m) / sd) - stats.norm.cdf((xx - 1 / 255 - m) / sd)
    exact[0] = stats.norm.cdf((xx[0] + 1 / 255 - m[0]) / sd[0])  # open-ended edge bins
    exact[-1] = 1 - stats.norm.cdf((xx[-1] - 1 / 255 - m[-1]) / sd[-1])
    # the tanh approximation of the CDF (improved-diffusion) is within ~1e-3 of the exact one
    np.testing.assert_allclose(got, exact, rtol=2e-2, atol=2e-4)


def test_prior_bpd_closed_form():
    x0 = jnp.zeros((2, 4, 4, 1))
    ab = S.np64["alphas_cumprod"][-1]
    expected = 0.5 * (-1 - math.log(1 - ab) + (1 - ab)) / math.log(2)
    np.testing.assert_allclose(np.asarray(P.prior_bpd(x0)), expected, rtol=1e-4, atol=1e-8)
    x1 = jnp.ones((1, 2, 2, 1))
    expected1 = 0.5 * (-1 - math.log(1 - ab) + (1 - ab) + ab) / math.log(2)
    np.testing.assert_allclose(np.asarray(P.prior_bpd(x1)), expected1, rtol=1e-4)


def _true_eps_apply(x0):
    def apply(xt, t):
        return (xt - g.extract(S.sqrt_alphas_cumprod, t, xt.ndim) * x0) / g.extract(
            S.sqrt_one_minus_alphas_cumprod, t, xt.ndim
        )

    return apply


def test_kl_is_zero_for_true_noise_with_fixed_small_variance():
    key = jax.random.PRNGKey(0)
    x0 = jax.random.uniform(key, (3, 4, 4, 1), minval=-1, maxval=1)
    t = jnp.array([1, 200, 999])
    noise = jax.random.normal(jax.random.PRNGKey(1), x0.shape)
    xt = P.q_sample(x0, t, noise)
    terms = DDPM(S, target="eps", variance="fixed_small").vb_terms_bpd(x0, xt, t, noise)
    np.testing.assert_allclose(np.asarray(terms), 0.0, atol=2e-4)


@pytest.mark.parametrize("target", ["eps", "x0", "v"])
def test_every_target_recovers_x0(target):
    x0 = jax.random.uniform(jax.random.PRNGKey(2), (3, 4, 4, 1), minval=-1, maxval=1)
    t = jnp.array([0, 300, 900])
    noise = jax.random.normal(jax.random.PRNGKey(3), x0.shape)
    xt = P.q_sample(x0, t, noise)
    out = DDPM(S, target=target).training_target(x0, t, noise)
    np.testing.assert_allclose(np.asarray(DDPM(S, target=target).predict_x0(xt, t, out)), np.asarray(x0), atol=3e-3)


def test_kl_term_by_hand_for_zero_model():
    """t = 500, zero eps prediction: the model mean is coef2 * x_t / ... computed here with numpy from the formulas."""
    s = S.np64
    x0 = np.full((1, 1, 1, 1), 0.5)
    t = 500
    xt = math.sqrt(s["alphas_cumprod"][t]) * 0.5 + math.sqrt(1 - s["alphas_cumprod"][t]) * -0.7
    true_mean = s["posterior_mean_coef1"][t] * 0.5 + s["posterior_mean_coef2"][t] * xt
    x0_hat = math.sqrt(1 / s["alphas_cumprod"][t]) * xt
    model_mean = s["posterior_mean_coef1"][t] * x0_hat + s["posterior_mean_coef2"][t] * xt
    lv_true, lv_model = math.log(s["posterior_variance"][t]), math.log(s["betas"][t])
    kl = 0.5 * (
        -1 + lv_model - lv_true + math.exp(lv_true - lv_model) + (true_mean - model_mean) ** 2 * math.exp(-lv_model)
    )
    got = P.vb_terms_bpd(
        jnp.asarray(x0, jnp.float32), jnp.asarray([[[[xt]]]], jnp.float32), jnp.array([t]), jnp.zeros((1, 1, 1, 1))
    )
    assert float(got[0]) == pytest.approx(kl / math.log(2), rel=1e-3)


def test_batched_terms_equal_per_timestep_loop():
    x0 = jax.random.uniform(jax.random.PRNGKey(4), (4, 4, 4, 1), minval=-1, maxval=1)
    ts = jnp.array([0, 3, 500, 999])
    noise = jax.random.normal(jax.random.PRNGKey(5), (4,) + x0.shape)
    apply = lambda xt, t: 0.1 * xt + 0.01 * t[:, None, None, None]  # any deterministic "network"
    batched = P.bound_terms(apply, x0, ts, noise)
    for k, t in enumerate(ts):
        tt = jnp.full((4,), t)
        xt = P.q_sample(x0, tt, noise[k])
        ref = P.vb_terms_bpd(x0, xt, tt, apply(xt, tt))
        np.testing.assert_allclose(np.asarray(batched[:, k]), np.asarray(ref), rtol=1e-5, atol=1e-6)


def _nll(apply_for, x0):
    # bound_terms folds the T timesteps batch-major (example b's rows adjacent), in chunks of 64 rows here
    def apply(xt, t):
        k = xt.shape[0] // x0.shape[0]
        return apply_for(jnp.repeat(x0, k, axis=0))(xt, t)

    nll, terms, prior = P.nll_bpd(apply, x0, jax.random.PRNGKey(6), pixels=False, max_rows=64)
    np.testing.assert_allclose(np.asarray(nll), np.asarray(terms.sum(1) + prior), rtol=1e-6)
    assert terms.shape == (x0.shape[0], S.num_timesteps)
    return nll


def test_true_noise_model_has_lower_nll_than_zero_model():
    x0 = jnp.round(jax.random.uniform(jax.random.PRNGKey(7), (2, 4, 4, 1), minval=-1, maxval=1) * 127.5) / 127.5
    nll_true = _nll(_true_eps_apply, x0)
    nll_zero = _nll(lambda _: lambda xt, t: jnp.zeros_like(xt), x0)
    assert bool(jnp.all(nll_true < nll_zero))
    assert bool(jnp.all(nll_true > 0))


@pytest.mark.parametrize("max_rows", [4, 8, 12])
def test_chunked_terms_equal_unchunked(max_rows):
    """lax.map over chunks of timesteps (padding the last chunk) gives the same [B, K] terms."""
    x0 = jax.random.uniform(jax.random.PRNGKey(8), (4, 4, 4, 1), minval=-1, maxval=1)
    ts = jnp.array([0, 7, 100, 500, 999])
    noise = jax.random.normal(jax.random.PRNGKey(9), (5,) + x0.shape)
    apply = lambda xt, t: 0.2 * xt - 0.001 * t[:, None, None, None]
    full = P.bound_terms(apply, x0, ts, noise, kind="kl")
    chunked = P.bound_terms(apply, x0, ts, noise, kind="kl", max_rows=max_rows)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(full), rtol=1e-5, atol=1e-7)


def test_stratified_timesteps_cover_every_t_once_by_weight():
    T, K = S.num_timesteps, 50
    ts, w = g.stratified_timesteps(T, K, jax.random.PRNGKey(0))
    ts, w = np.asarray(ts), np.asarray(w)
    assert ts[0] == 0 and w[0] == 1 and w.sum() == T  # t = 0 alone, then strata of 1..T-1 summing to T - 1
    edges = np.concatenate([[1], 1 + np.cumsum(w[1:])])  # stratum k covers [edges[k-1], edges[k])
    np.testing.assert_array_equal(edges, g.stratum_edges(T, K - 1))
    assert np.all((ts[1:] >= edges[:-1]) & (ts[1:] < edges[1:]))
    # geometric: single timesteps at small t, where the bound's terms change fast; wide strata at large t
    assert np.all(w[1:21] == 1) and np.all(np.diff(w[21:]) >= 0) and w[-1] > 100
    assert list(g.stratum_edges(1000, 5)) == [1, 4, 16, 63, 251, 1000]  # round(1000^(k/5)), k = 0..5
    assert np.all(np.diff(g.stratum_edges(T, T - 1)) == 1)


def test_strata_timesteps_fall_in_their_geometric_strata_with_their_sizes():
    """eval.bound_strata's draws on the chain: m timesteps in each geometric stratum of 1..T-1, uniform within it
    (every timestep of a 7-wide stratum drawn about equally often), sizes summing to T - 1."""
    T, K, m = S.num_timesteps, 8, 4000
    ts, sizes = g.strata_timesteps(T, K, m, jax.random.PRNGKey(0))
    ts, sizes = np.asarray(ts), np.asarray(sizes)
    edges = g.stratum_edges(T, K)
    assert ts.shape == (K, m) and list(edges) == [1, 2, 6, 13, 32, 75, 178, 422, 1000]
    np.testing.assert_array_equal(sizes, np.diff(edges))
    assert sizes.sum() == T - 1 and np.all(ts == np.clip(ts, edges[:-1, None], edges[1:, None] - 1))
    assert np.all(ts[0] == 1)  # a stratum of one timestep: its draws differ in their noise only
    counts = np.bincount(ts[2] - 6, minlength=7)  # the stratum 6..12: 7 timesteps, 4000 draws
    assert counts.min() > 4000 / 7 - 4 * np.sqrt(4000 / 7) and counts.max() < 4000 / 7 + 4 * np.sqrt(4000 / 7)


def test_bound_estimate_with_every_timestep_is_the_bound_and_unbiased_otherwise():
    x0 = jnp.round(jax.random.uniform(jax.random.PRNGKey(7), (2, 4, 4, 1), minval=-1, maxval=1) * 127.5) / 127.5
    apply = lambda xt, t: 0.3 * xt - 0.0004 * t[:, None, None, None]  # a fixed imperfect "network"
    key = jax.random.PRNGKey(11)
    full, terms, prior = P.nll_bpd(apply, x0, key, max_rows=2048)
    every = P.nll_bpd_estimate(apply, x0, key, S.num_timesteps, max_rows=2048)
    np.testing.assert_allclose(np.asarray(every), np.asarray(full), rtol=1e-6)
    # E over random strata and noise of the 10-timestep estimate = the full bound (its mean over fresh noise)
    est = jax.jit(jax.vmap(lambda k: P.nll_bpd_estimate(apply, x0, k, 10)))
    draws = np.asarray(est(jax.random.split(jax.random.PRNGKey(12), 4000)))  # [4000, 2]
    fulls = np.asarray(
        jax.jit(jax.vmap(lambda k: P.nll_bpd(apply, x0, k)[0]))(jax.random.split(jax.random.PRNGKey(13), 40))
    )
    se = np.sqrt(draws.var(0) / len(draws) + fulls.var(0) / len(fulls))
    assert np.all(np.abs(draws.mean(0) - fulls.mean(0)) < 4 * se), (draws.mean(0), fulls.mean(0), se)
    assert np.all(draws.std(0) > 0)
