"""The learned-range variance (improved-diffusion ModelVarType.LEARNED_RANGE) and its hybrid loss, against closed
forms computed here in numpy float64, and against the fixed-variance code where the learned variance equals it."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from diffusion import DDPM, PROCESSES, make_process, make_schedule

S = make_schedule("linear", 1000)
L = DDPM(S, target="eps", variance="learned_range")
C = 1


def _x0(key, shape=(3, 4, 4, C)):
    x = jnp.round(jax.random.uniform(jax.random.PRNGKey(key), shape, minval=-1, maxval=1) * 127.5) / 127.5
    return x.at[0, 0, 0].set(-1.0).at[0, 0, 1].set(1.0)  # the open-ended edge bins of the decoder


def _np_logvar(t, v):
    s = S.np64
    post = s["betas"] * (1 - s["alphas_cumprod_prev"]) / (1 - s["alphas_cumprod"])
    min_log = np.log(np.append(post[1], post[1:]))[t]
    max_log = np.log(s["betas"])[t]
    frac = (v + 1) / 2
    return frac * max_log + (1 - frac) * min_log


def _tanh_cdf(x):
    return 0.5 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_out_channels_field_and_config():
    assert L.out_channels(3) == 6 and DDPM(S).out_channels(3) == 3
    assert DDPM(S, variance="fixed_small").out_channels(4) == 4
    cfg = PROCESSES.default_config("ddpm")
    assert cfg.vb_weight == 0.001
    cfg.variance, cfg.vb_weight, cfg.num_timesteps = "learned_range", 0.01, 100
    p = make_process(cfg)
    assert p.learned_variance and p.vb_weight == 0.01 and p.vb_scale == pytest.approx(1.0)
    assert DDPM(S).vb_scale == 0.0
    with pytest.raises(ValueError, match="2C = 2 channels"):
        L.predict_x0(jnp.zeros((1, 2, 2, 1)), jnp.array([3]), jnp.zeros((1, 2, 2, 1)))


@pytest.mark.parametrize("t", [0, 1, 10, 500, 999])
def test_learned_log_variance_closed_form(t):
    s = S.np64
    post = s["betas"] * (1 - s["alphas_cumprod_prev"]) / (1 - s["alphas_cumprod"])
    beta_tilde_clipped = post[1] if t == 0 else post[t]
    tt = jnp.array([t, t])
    for v, expected in [
        (-1.0, math.log(beta_tilde_clipped)),
        (1.0, math.log(s["betas"][t])),
        (0.0, math.log(math.sqrt(s["betas"][t] * beta_tilde_clipped))),  # the geometric mean of the two variances
    ]:
        got = L.model_log_variance(tt, 4, jnp.full((2, 2, 2, C), v))
        assert got.shape == (2, 2, 2, C)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)
    v = np.linspace(-1.3, 1.3, 8).reshape(2, 2, 2, 1)  # any v, also outside [-1, 1] (not clipped, as the reference)
    got = L.model_log_variance(tt, 4, jnp.asarray(v, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), _np_logvar(t, v), rtol=1e-5)


def _np_terms(x0, xt, t, eps, v):
    """Bound term L_t in bits/dim per example: the Gaussian KL (t > 0) or the tanh-CDF decoder NLL (t = 0)."""
    s = S.np64
    x0, xt, eps, v = (np.asarray(a, np.float64) for a in (x0, xt, eps, v))
    out = []
    for b, tb in enumerate(np.asarray(t)):
        ab = s["alphas_cumprod"][tb]
        x0_hat = math.sqrt(1 / ab) * xt[b] - math.sqrt(1 / ab - 1) * eps[b]
        c1, c2 = s["posterior_mean_coef1"][tb], s["posterior_mean_coef2"][tb]
        mean, true_mean = c1 * x0_hat + c2 * xt[b], c1 * x0[b] + c2 * xt[b]
        lv = _np_logvar(tb, v[b])
        if tb > 0:
            lv_true = s["posterior_log_variance_clipped"][tb]
            kl = 0.5 * (-1 + lv - lv_true + np.exp(lv_true - lv) + (true_mean - mean) ** 2 * np.exp(-lv))
            out.append(kl.mean() / math.log(2))
        else:
            inv = np.exp(-0.5 * lv)
            plus, minus = _tanh_cdf(inv * (x0[b] - mean + 1 / 255)), _tanh_cdf(inv * (x0[b] - mean - 1 / 255))
            p = np.where(x0[b] < -0.999, plus, np.where(x0[b] > 0.999, 1 - minus, plus - minus))
            out.append(-np.log(np.maximum(p, 1e-12)).mean() / math.log(2))
    return np.array(out)


def test_learned_vb_terms_closed_form():
    x0 = _x0(0)
    t = jnp.array([0, 7, 400])
    noise = jax.random.normal(jax.random.PRNGKey(1), x0.shape)
    xt = L.q_sample(x0, t, noise)
    eps = noise + 0.05 * jax.random.normal(jax.random.PRNGKey(2), x0.shape)  # an imperfect eps prediction
    v = jax.random.uniform(jax.random.PRNGKey(3), x0.shape, minval=-1, maxval=1)
    got = L.vb_terms_bpd(x0, xt, t, jnp.concatenate([eps, v], -1))
    np.testing.assert_allclose(np.asarray(got), _np_terms(x0, xt, t, eps, v), rtol=2e-3)
    # t = 0 is the decoder NLL: close to the exact normal CDF too (the tanh approximation is improved-diffusion's)
    lv = _np_logvar(0, np.asarray(v[0], np.float64))
    mean = np.asarray(L.p_mean_variance(xt, t, jnp.concatenate([eps, v], -1), False)[0][0], np.float64)
    sd, x = np.exp(0.5 * lv), np.asarray(x0[0], np.float64)
    p = stats.norm.cdf((x + 1 / 255 - mean) / sd) - stats.norm.cdf((x - 1 / 255 - mean) / sd)
    p = np.where(x < -0.999, stats.norm.cdf((x + 1 / 255 - mean) / sd), p)
    p = np.where(x > 0.999, 1 - stats.norm.cdf((x - 1 / 255 - mean) / sd), p)
    assert float(got[0]) == pytest.approx(-np.log(np.maximum(p, 1e-12)).mean() / math.log(2), rel=5e-2)


def _fixed_v(variance):
    """v that makes the learned variance the fixed one: fixed_small is v = -1; fixed_large is v = +1 for t > 0 and
    v = -1 at t = 0 (both fixed variances use beta~_1 there)."""

    def v_of(xt, t):
        v = jnp.where(t > 0, 1.0, -1.0) if variance == "fixed_large" else jnp.full(t.shape, -1.0)
        return jnp.broadcast_to(v.reshape(-1, 1, 1, 1), xt.shape)

    return v_of


@pytest.mark.parametrize("variance", ["fixed_small", "fixed_large"])
def test_learned_bound_equals_fixed_bound_where_the_variances_agree(variance):
    fixed = DDPM(S, target="eps", variance=variance)
    mean_fn = lambda xt, t: 0.3 * xt - 0.0004 * t[:, None, None, None]  # a fixed imperfect "network"
    v_of = _fixed_v(variance)
    learned_fn = lambda xt, t: jnp.concatenate([mean_fn(xt, t), v_of(xt, t)], -1)
    x0 = _x0(4, (2, 4, 4, C))
    key = jax.random.PRNGKey(5)
    nll_l, terms_l, prior_l = L.nll_bpd(learned_fn, x0, key, max_rows=1024)
    nll_f, terms_f, prior_f = fixed.nll_bpd(mean_fn, x0, key, max_rows=1024)
    np.testing.assert_allclose(np.asarray(terms_l), np.asarray(terms_f), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nll_l), np.asarray(nll_f), rtol=1e-5)
    est_l = L.nll_bpd_estimate(learned_fn, x0, key, 10)
    np.testing.assert_allclose(np.asarray(est_l), np.asarray(fixed.nll_bpd_estimate(mean_fn, x0, key, 10)), rtol=1e-5)
    ts = jnp.array([0, 1, 300, 999])
    noise = jax.random.normal(key, (4,) + x0.shape)
    kl_l = L.bound_terms(learned_fn, x0, ts, noise, kind="kl")
    kl_f = fixed.bound_terms(mean_fn, x0, ts, noise, kind="kl")
    np.testing.assert_allclose(np.asarray(kl_l), np.asarray(kl_f), rtol=1e-4, atol=1e-6)


def test_stop_gradient_of_the_hybrid_loss():
    x0 = _x0(6, (4, 2, 2, C))
    t = jnp.array([0, 1, 250, 999])
    noise = jax.random.normal(jax.random.PRNGKey(7), x0.shape)
    out0 = jnp.concatenate([0.9 * noise, jax.random.uniform(jax.random.PRNGKey(8), x0.shape, minval=-1, maxval=1)], -1)

    def loss(out, which):
        return jnp.sum(L.example_losses(lambda xt, tt: out, x0, t, noise)[which])

    g_mse, g_vb = jax.grad(loss)(out0, 0), jax.grad(loss)(out0, 1)
    assert np.all(np.asarray(g_vb[..., :C]) == 0.0)  # vb does not train the mean
    assert np.all(np.abs(np.asarray(g_vb[..., C:])).reshape(4, -1).max(1) > 0)  # it trains the variance, every t
    assert np.all(np.asarray(g_mse[..., C:]) == 0.0)  # the mse does not train the variance
    assert np.all(np.abs(np.asarray(g_mse[..., :C])).reshape(4, -1).max(1) > 0)


@pytest.mark.parametrize("T", [1000, 100])
def test_hybrid_loss_scaling_by_hand(T):
    """improved-diffusion (RESCALED_MSE): loss = mse + vb_bpd * num_timesteps / 1000, lambda = 0.001 of sum_t L_t."""
    sched = make_schedule("linear", T)
    p = DDPM(sched, target="eps", variance="learned_range")
    s = sched.np64
    t, x0v, nv, eps_hat, v = T // 2, 0.5, -0.7, -0.6, 0.3
    ab = s["alphas_cumprod"][t]
    xt = math.sqrt(ab) * x0v + math.sqrt(1 - ab) * nv
    true_mean = s["posterior_mean_coef1"][t] * x0v + s["posterior_mean_coef2"][t] * xt
    x0_hat = math.sqrt(1 / ab) * xt - math.sqrt(1 / ab - 1) * eps_hat
    model_mean = s["posterior_mean_coef1"][t] * x0_hat + s["posterior_mean_coef2"][t] * xt
    lv_true = math.log(s["posterior_variance"][t])
    lv_model = (v + 1) / 2 * math.log(s["betas"][t]) + (1 - (v + 1) / 2) * lv_true
    kl = 0.5 * (
        -1 + lv_model - lv_true + math.exp(lv_true - lv_model) + (true_mean - model_mean) ** 2 / math.exp(lv_model)
    )
    vb_bits = kl / math.log(2)
    out = jnp.array([eps_hat, v], jnp.float32).reshape(1, 1, 1, 2)
    args = (lambda xt_, t_: out, jnp.full((1, 1, 1, 1), x0v), jnp.array([t]), jnp.full((1, 1, 1, 1), nv))
    mse, vb = p.example_losses(*args)
    assert float(mse[0]) == pytest.approx((eps_hat - nv) ** 2, rel=1e-5)
    assert float(vb[0]) == pytest.approx(vb_bits * T / 1000.0, rel=1e-3)
    assert float(p.example_mse(*args)[0]) == float(mse[0])
    p10 = DDPM(sched, target="eps", variance="learned_range", vb_weight=0.01)
    assert float(p10.example_losses(*args)[1][0]) == pytest.approx(10 * float(vb[0]), rel=1e-6)


def test_fixed_variance_losses_are_example_mse_and_zero_vb():
    fixed = DDPM(S, target="v", variance="fixed_large")
    x0 = _x0(9)
    t = jnp.array([0, 10, 900])
    noise = jax.random.normal(jax.random.PRNGKey(10), x0.shape)
    apply = lambda xt, tt: 0.5 * xt + 0.001 * tt[:, None, None, None]
    mse, vb = jax.jit(lambda: fixed.example_losses(apply, x0, t, noise))()
    np.testing.assert_array_equal(
        np.asarray(mse), np.asarray(jax.jit(lambda: fixed.example_mse(apply, x0, t, noise))())
    )
    np.testing.assert_array_equal(np.asarray(vb), 0.0)
    # the learned process's mse is the fixed one's on the mean part
    learned = DDPM(S, target="v", variance="learned_range")
    apply2 = lambda xt, tt: jnp.concatenate([apply(xt, tt), jnp.ones_like(xt)], -1)
    np.testing.assert_array_equal(
        np.asarray(learned.example_mse(apply2, x0, t, noise)), np.asarray(fixed.example_mse(apply, x0, t, noise))
    )


@pytest.mark.parametrize("method", ["ancestral", "ddim"])
def test_sampling_with_learned_variance(method):
    sched = make_schedule("cosine", 50)
    p, fixed = DDPM(sched, target="eps", variance="learned_range"), DDPM(sched, target="eps", variance="fixed_large")
    mean_fn = lambda x, t: 0.1 * x
    v_of = _fixed_v("fixed_large")
    learned_fn = lambda x, t: jnp.concatenate([mean_fn(x, t), v_of(x, t)], -1)
    shape, key = (2, 4, 4, 3), jax.random.PRNGKey(11)
    x = p.sample(learned_fn, key, shape, method, steps=5)
    assert x.shape == shape and bool(jnp.all(jnp.isfinite(x))) and float(jnp.abs(x).max()) <= 1.0
    ref = fixed.sample(mean_fn, key, shape, method, steps=5)
    np.testing.assert_allclose(np.asarray(x), np.asarray(ref), atol=1e-5)
    if method == "ddim":  # DDIM uses only the mean part: the variance channels change nothing
        other = lambda x, t: jnp.concatenate([mean_fn(x, t), -0.5 * jnp.ones_like(x)], -1)
        np.testing.assert_array_equal(np.asarray(p.sample(other, key, shape, method, steps=5)), np.asarray(x))


@pytest.mark.parametrize("variance", ["learned_range", "fixed_large"])
def test_guide(variance):
    p = DDPM(S, target="eps", variance=variance)
    c = 3
    shape = (2, 4, 4, p.out_channels(c))
    cond = jax.random.normal(jax.random.PRNGKey(12), shape).at[0, 0, 0, 0].set(-0.0)
    uncond = jax.random.normal(jax.random.PRNGKey(13), shape)
    bits = lambda a: np.asarray(a).view(np.uint32)
    np.testing.assert_array_equal(bits(p.guide(cond, uncond, 1.0)), bits(cond))
    np.testing.assert_array_equal(bits(p.guide(cond, uncond, 1)), bits(cond))
    np.testing.assert_array_equal(bits(jax.jit(p.guide)(cond, uncond, 1.0)), bits(cond))  # a traced scale
    g0 = p.guide(cond, uncond, 0.0)
    np.testing.assert_array_equal(np.asarray(g0[..., :c]), np.asarray(uncond[..., :c]))
    g4 = p.guide(cond, uncond, 4.0)
    expected = np.asarray(uncond[..., :c]) + 4.0 * (np.asarray(cond[..., :c]) - np.asarray(uncond[..., :c]))
    np.testing.assert_allclose(np.asarray(g4[..., :c]), expected, rtol=1e-6, atol=1e-6)
    assert g0.shape == g4.shape == shape
    if variance == "learned_range":  # the variance channels are the conditional output's
        for out in (g0, g4, jax.jit(p.guide)(cond, uncond, 4.0)):
            np.testing.assert_array_equal(bits(out[..., c:]), bits(cond[..., c:]))
