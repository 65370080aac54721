"""The learned timestep sampler: policy, F-statistic selection, reward, policy learning, the fused step."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from conftest import tiny_config
from data import load_split
from diffusion import make_process
from models import make_model
from samplers import StepContext, make_sampler
from samplers.fstat import f_statistic, select_k_best
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob, u_to_t
from training.step import make_terms_fn, to_float
from training.validate import ConfigError, validate


def digits(n):
    return to_float(jnp.asarray(load_split(tiny_config().data, "train").get(np.arange(n))))


@pytest.mark.parametrize("shape", [(2, 8, 8, 1), (2, 12, 12, 3), (1, 32, 32, 3)])
def test_policy_starts_near_uniform_for_any_image_shape(shape):
    p = BetaPolicy((8, 16, 32), (32, 32))
    x = jax.random.uniform(jax.random.PRNGKey(0), shape, minval=-1, maxval=1)
    a, b = p.apply(p.init(jax.random.PRNGKey(1), x), x)
    expected = float(np.log1p(np.exp(0.5)) + 1e-5)  # softplus(0.5) + 1e-5 = 0.974
    np.testing.assert_allclose(np.asarray(a), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b), expected, rtol=1e-6)


def test_beta_density_entropy_and_rounding():
    u, a, b = jnp.array([0.1, 0.5, 0.93]), jnp.array([0.974, 2.0, 0.5]), jnp.array([0.974, 3.0, 1.5])
    np.testing.assert_allclose(np.asarray(beta_log_prob(u, a, b)), stats.beta.logpdf(u, a, b), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(beta_entropy(a, b)), stats.beta.entropy(a, b), rtol=1e-4, atol=1e-5)
    assert np.isfinite(float(beta_log_prob(jnp.array(0.0), 0.5, 0.5)))  # u clipped into (eps, 1 - eps)
    np.testing.assert_array_equal(np.asarray(u_to_t(jnp.array([0.0, 0.5, 0.4995, 1.0]), 1000)), [0, 500, 499, 999])


@pytest.mark.parametrize("rows", [2, 7, 20])
def test_f_statistic_selection_matches_sklearn(rows):
    from sklearn.feature_selection import SelectKBest, f_regression

    rng = np.random.default_rng(rows)
    cap, K = 20, 30
    X = rng.normal(size=(cap, K)).astype(np.float32)
    y = (X[:, 4] * 2 + X[:, 17] + 0.3 * rng.normal(size=cap)).astype(np.float32)
    X[:, 9] = 1.5  # a constant column: F undefined -> 0, as sklearn's force_finite
    valid = np.arange(cap) < rows
    f = np.asarray(f_statistic(jnp.asarray(X), jnp.asarray(y), jnp.asarray(valid)))
    if rows > 2:
        ref = f_regression(X[valid], y[valid])[0]
        np.testing.assert_allclose(f, ref, rtol=2e-3, atol=1e-3)
        assert f[9] == 0.0
    sel = np.asarray(select_k_best(jnp.asarray(X), jnp.asarray(y), jnp.asarray(valid), 3))
    ref_sel = SelectKBest(f_regression, k=3).fit(X[valid], y[valid]).get_support(indices=True)
    np.testing.assert_array_equal(sel, ref_sel)


def _adaptive(**kw):
    c = tiny_config(
        **{
            "sampler.name": "adaptive",
            "sampler.adaptive.policy_channels": (8, 16),
            "sampler.adaptive.policy_hidden": (32,),
            **kw,
        }
    )
    validate(c)
    P = make_process(c.diffusion)
    return c, P, make_sampler(c.sampler, P, c.train.batch_size)


def probe_context(sampler, state, model, process, x0, params_before, params_after):
    """The StepContext of a policy update at step 0 whose model moved from params_before to params_after."""
    t, _, aux = sampler.sample(state, jax.random.PRNGKey(2), x0)
    return StepContext(
        step=jnp.int32(0),
        key=jax.random.PRNGKey(3),
        x0=x0,
        t=t,
        aux=aux,
        losses=jnp.zeros(len(x0)),
        params_before=params_before,
        params_after=params_after,
        terms_fn=make_terms_fn(model, process),
    )


def test_reward_is_zero_when_the_update_changes_nothing():
    c, P, sampler = _adaptive(**{"sampler.adaptive.probe_batch_size": 8})
    model = make_model(c.model)
    x0 = digits(16)
    params = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    params = jax.tree.map(lambda p: p + 0.01, params)  # a non-zero network (the output conv starts at zero)
    state = sampler.init(jax.random.PRNGKey(1), x0)
    ctx = probe_context(sampler, state, model, P, x0, params, params)
    new, metrics = jax.jit(lambda st: sampler.update(st, ctx))(state)
    assert float(new["reward"]) == 0.0 and int(new["updates"]) == 1
    np.testing.assert_array_equal(np.asarray(new["X"][0]), 0.0)
    assert not np.array_equal(np.asarray(metrics["S"]), [])


def test_reward_is_positive_when_the_update_fits_the_probed_timesteps():
    c, P, sampler = _adaptive(
        **{"sampler.adaptive.probe_batch_size": 16, "model.dropout": 0.0, "sampler.adaptive.probe_dropout": False}
    )
    model = make_model(c.model)
    x0 = digits(16)
    params = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    S = jnp.array([300, 400, 500], jnp.int32)
    state = dict(sampler.init(jax.random.PRNGKey(1), x0), S=S)
    tx = optax.adam(3e-3)

    @jax.jit
    def fit(params, opt, key):  # steps of the eps-MSE at the probed timesteps only
        t = S[jax.random.randint(key, (16,), 0, 3)]
        noise = jax.random.normal(jax.random.fold_in(key, 1), x0.shape)
        loss = lambda p: jnp.mean((model.apply(p, P.q_sample(x0, t, noise), t) - noise) ** 2)
        upd, opt = tx.update(jax.grad(loss)(params), opt, params)
        return optax.apply_updates(params, upd), opt

    after, opt = params, tx.init(params)
    for i in range(30):
        after, opt = fit(after, opt, jax.random.PRNGKey(100 + i))
    ctx = probe_context(sampler, state, model, P, x0, params, after)
    new, _ = jax.jit(lambda st: sampler.update(st, ctx))(state)
    assert float(new["reward"]) > 0.0


def test_policy_moves_its_mass_into_the_band_that_lowers_the_bound():
    """Synthetic problem: the update lowers every probed term by 1 for images whose drawn t is in [600, 800) and
    leaves the others unchanged, so R_i = |S| 1[t_i in band]. The policy must learn to draw from the band."""
    B, lo, hi = 32, 600, 800
    c, P, sampler = _adaptive(
        **{
            "train.batch_size": B,
            "sampler.adaptive.probe_batch_size": B,
            "sampler.adaptive.update_every": 1,
            "sampler.adaptive.entropy_coef": 0.0,
        }
    )
    x0 = digits(B)
    terms = lambda p, x, ts, noise, **kw: jnp.broadcast_to(p[: x.shape[0], None], (x.shape[0], ts.shape[0]))

    @jax.jit
    def one_update(state, key):
        t, _, aux = sampler.sample(state, key, x0)
        after = 1.0 - ((t >= lo) & (t < hi)).astype(jnp.float32)
        ctx = StepContext(
            step=jnp.int32(0),
            key=jax.random.fold_in(key, 1),
            x0=x0,
            t=t,
            aux=aux,
            losses=jnp.zeros(B),
            params_before=jnp.ones(B),
            params_after=after,
            terms_fn=terms,
        )
        return sampler.update(state, ctx)[0], jnp.mean(((t >= lo) & (t < hi)).astype(jnp.float32))

    state = sampler.init(jax.random.PRNGKey(0), x0)
    fractions = []
    for i in range(150):
        state, frac = one_update(state, jax.random.PRNGKey(i))
        fractions.append(float(frac))
    assert np.mean(fractions[:10]) < 0.35  # starts near uniform: 20% of the mass in the band
    assert np.mean(fractions[-20:]) > 0.6


def test_bad_sampler_settings_are_refused_before_training():
    for field, value, needle in [
        (
            "sampler.adaptive.num_selected",
            2000,
            "config.sampler.adaptive.num_selected=2000 is not allowed: |S| must be in 1..20: at most T=1000 and at "
            "most the 20 timesteps of the sweep grid (stride 50)",
        ),
        (
            "sampler.adaptive.update_every",
            0,
            "config.sampler.adaptive.update_every=0 is not allowed: must be an integer >= 1",
        ),
        (
            "sampler.adaptive.probe_batch_size",
            32,
            "config.sampler.adaptive.probe_batch_size=32 is not allowed: must be -1 (the whole batch) or a divisor of "
            "config.train.batch_size=16",
        ),
        (
            "sampler.adaptive.entropy_form",
            "other",
            "config.sampler.adaptive.entropy_form='other' is not allowed: must be one of standard, reference",
        ),
    ]:
        with pytest.raises(ConfigError, match=re.escape(needle)):
            validate(tiny_config(**{"sampler.name": "adaptive", field: value}))
