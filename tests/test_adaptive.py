"""The learned timestep sampler: policy, F-statistic selection, reward, policy learning, the fused step."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from config.validate import ConfigError, validate
from conftest import tiny_config
from data import load_split
from diffusion import make_process
from diffusion.time import DiscreteTime, sweep_grid
from models import make_model
from samplers import StepContext, make_sampler
from samplers.fstat import f_statistic, select_k_best
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob
from training.step import make_rows_fn, to_float


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
    u = jnp.array([0.0, 0.5, 0.4995, 1.0])
    np.testing.assert_array_equal(DiscreteTime(1000).from_unit(u, "nearest"), [0, 500, 499, 999])  # round(u (T - 1))


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
        rows_fn=make_rows_fn(model, process),
    )


@pytest.mark.slow  # two policy-update compiles, over 20 s: CI's second job
def test_reward_is_zero_when_the_update_changes_nothing():
    c, P, sampler = _adaptive(**{"sampler.adaptive.probe_batch_size": 8})
    model = make_model(c.model)
    x0 = digits(16)
    params = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    params = jax.tree.map(lambda p: p + 0.01, params)  # a non-zero network (the output conv starts at zero)
    state = sampler.init(jax.random.PRNGKey(1), x0)
    ctx = probe_context(sampler, state, model, P, x0, params, params)
    new, metrics = jax.jit(lambda st: sampler.update(st, ctx))(state)
    assert float(new.reward) == 0.0 and int(new.updates) == 1
    np.testing.assert_array_equal(np.asarray(new.sweep_rows[0]), 0.0)
    # an all-zero sweep row is no valid row of the F-statistic: S stays the initial {0, 1, 2}, no F-scores
    np.testing.assert_array_equal(np.asarray(metrics["S"]), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(metrics["f_top"]), 0.0)
    # with fresh noise after the update (common_noise off) the same model gives a non-zero reward: noise alone
    c, P, sampler = _adaptive(**{"sampler.adaptive.probe_batch_size": 8, "sampler.adaptive.common_noise": False})
    new, _ = jax.jit(lambda st: sampler.update(st, ctx))(sampler.init(jax.random.PRNGKey(1), x0))
    assert float(new.reward) != 0.0


def test_reward_is_positive_when_the_update_fits_the_probed_timesteps():
    c, P, sampler = _adaptive(
        **{"sampler.adaptive.probe_batch_size": 16, "model.dropout": 0.0, "sampler.adaptive.probe_dropout": False}
    )
    model = make_model(c.model)
    x0 = digits(16)
    params = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    S = jnp.array([300, 400, 500], jnp.int32)
    state = sampler.init(jax.random.PRNGKey(1), x0).replace(probe_times=S)
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
    assert float(new.reward) > 0.0


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
    # the "network": params is one value per probe image; rows are image-major (image b's |S| rows adjacent)
    terms = lambda p, x, t, noise, **kw: jnp.repeat(p, -(-x.shape[0] // p.shape[0]))[: x.shape[0]]

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
            rows_fn=terms,
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
        (  # 4 probe images cannot be spread evenly over the 8 devices the tests run on
            "sampler.adaptive.probe_batch_size",
            4,
            "config.sampler.adaptive.probe_batch_size=4 is not allowed: must be a multiple of the 8 devices of the "
            "data axis",
        ),
        (
            "sampler.adaptive.select_min_rows",
            30,
            "config.sampler.adaptive.select_min_rows=30 is not allowed: must be at most buffer_size=20",
        ),
    ]:
        with pytest.raises(ConfigError, match=re.escape(needle)):
            validate(tiny_config(**{"sampler.name": "adaptive", field: value}))


def fake_update(sampler, state, x0, rows_fn, key=0, step=0):
    """One policy update with a given rows_fn (what the step would compute)."""
    t, _, aux = sampler.sample(state, jax.random.PRNGKey(100 + key), x0)
    ctx = StepContext(
        step=jnp.int32(step),
        key=jax.random.PRNGKey(200 + key),
        x0=x0,
        t=t,
        aux=aux,
        losses=jnp.zeros(len(x0)),
        params_before=jnp.float32(0.0),
        params_after=jnp.float32(1.0),
        rows_fn=rows_fn,
    )
    return sampler.update(state, ctx)


def test_buffer_wraps_around_and_zero_rows_and_early_rows_select_nothing():
    """Sweep rows d_k = (k + 1) * g(tau) + noise-free structure: after 5 updates into a buffer of 3 the rows are
    updates 4, 5, 3 (ring order), count is 5, and S is sklearn's selection over the valid rows; an all-zero row is
    not valid, and fewer than 3 valid rows leave S alone."""
    from sklearn.feature_selection import SelectKBest, f_regression

    c, P, sampler = _adaptive(
        **{"sampler.adaptive.buffer_size": 3, "sampler.adaptive.sweep_stride": 100, "sampler.adaptive.update_every": 1}
    )
    x0 = digits(16)
    grid = np.arange(0, 1000, 100)
    rng = np.random.default_rng(0)
    tables = [rng.normal(size=grid.size).astype(np.float32) for _ in range(6)]

    def rows_for(before):  # before - after = `before` (a table) at the sweep's grid timesteps; the probe gets 0
        def rows_fn(params, x, t, noise, **kw):
            idx = jnp.searchsorted(jnp.asarray(grid), t)
            is_grid = jnp.asarray(grid)[jnp.clip(idx, 0, grid.size - 1)] == t
            return jnp.where(is_grid & (x.shape[0] == grid.size), params * -before[jnp.clip(idx, 0, 9)], 0.0)

        return rows_fn

    state = sampler.init(jax.random.PRNGKey(0), x0)
    update = jax.jit(lambda st, table: fake_update(sampler, st, x0, rows_for(table)))  # one program for all five
    states = []
    for k in range(5):
        state, metrics = update(state, jnp.asarray(tables[k]))
        states.append((state, metrics))
    X = np.asarray(state.sweep_rows)
    np.testing.assert_allclose(X, np.stack([tables[3], tables[4], tables[2]]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(state.sweep_totals), X.sum(1), rtol=1e-5)
    assert int(state.sweep_count) == 5
    np.testing.assert_array_equal(np.asarray(states[1][1]["S"]), [0, 1, 2])  # two rows: not yet
    want = grid[SelectKBest(f_regression, k=3).fit(X, X.sum(1)).get_support(indices=True)]
    np.testing.assert_array_equal(np.asarray(state.probe_times), want)
    # three rows of which one is all zero: two valid rows, S stays; sklearn over the valid rows otherwise
    X3 = jnp.asarray(np.stack([tables[0], np.zeros(grid.size, np.float32), tables[1]]))
    S, f = sampler.select(X3, X3.sum(1), jnp.int32(3), jnp.array([0, 1, 2]))
    np.testing.assert_array_equal(np.asarray(S), [0, 1, 2])
    X4 = jnp.asarray(np.stack([tables[0], np.zeros(grid.size, np.float32), tables[1], tables[5]]))
    sampler4 = make_sampler(override_adaptive(c, buffer_size=4), P, c.train.batch_size)
    S, f = sampler4.select(X4, X4.sum(1), jnp.int32(4), jnp.array([0, 1, 2]))
    valid = np.asarray(X4)[[0, 2, 3]]
    sel = SelectKBest(f_regression, k=3).fit(valid, valid.sum(1))
    np.testing.assert_array_equal(np.asarray(S), grid[sel.get_support(indices=True)])
    np.testing.assert_allclose(np.asarray(f), sel.scores_[sel.get_support(indices=True)], rtol=2e-3)


def override_adaptive(c, **fields):
    from config.fields import override

    c = c.copy_and_resolve_references()
    return override(c, {f"sampler.adaptive.{k}": v for k, v in fields.items()}).sampler


def test_sweep_row_and_its_target_equal_direct_bound_terms():
    """The buffer row is the mean over `sweep_images` (2) images of KL_tau(before) - KL_tau(after) on the grid, with
    the documented keys (ctx.key -> probe, sweep, pick; the sweep's noise from its first key); y = sum of the row."""
    c, P, sampler = _adaptive(
        **{
            "sampler.adaptive.sweep_images": 2,
            "sampler.adaptive.sweep_stride": 250,
            "sampler.adaptive.probe_dropout": False,
            "sampler.adaptive.probe_chunk_rows": 3,
        }
    )
    model = make_model(c.model)
    x0 = digits(16)
    before = jax.tree.map(lambda p: p + 0.01, model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32)))
    after = jax.tree.map(lambda p: p * 1.1, before)
    state = sampler.init(jax.random.PRNGKey(1), x0)
    ctx = probe_context(sampler, state, model, P, x0, before, after)
    new, _ = jax.jit(lambda st: sampler.update(st, ctx))(state)

    grid = jnp.array([0, 250, 500, 750])
    _, k_sweep, k_pick = jax.random.split(ctx.key, 3)
    pick = jax.random.choice(k_pick, 16, (2,), replace=False)
    x0r, tr = jnp.repeat(x0[pick], 4, axis=0), jnp.tile(grid, 2)
    noise = jax.random.normal(jax.random.split(k_sweep, 4)[0], x0r.shape)
    apply = lambda p: lambda x, t: model.apply(p, x, t)
    kl = lambda p: P.row_terms(apply(p), x0r, tr, noise, kind="kl").reshape(2, 4)
    want = np.asarray(jnp.mean(kl(before) - kl(after), axis=0))
    np.testing.assert_allclose(np.asarray(new.sweep_rows[0]), want, rtol=1e-4, atol=1e-7)
    assert float(new.sweep_totals[0]) == pytest.approx(float(want.sum()), rel=1e-4, abs=1e-7)
    assert np.abs(want).max() > 0


@pytest.mark.parametrize("form", ["standard", "reference"])
def test_policy_gradient_of_both_entropy_forms_by_hand(form):
    """At the initial head (weights 0, bias 0.5) every image has alpha = beta = softplus(0.5) + 1e-5: the gradient
    of the policy loss with respect to the alpha head's bias is sum_i dL/dalpha_i * sigmoid(0.5), with dL/dalpha
    from the Beta log-density and entropy by hand (scipy's digamma and trigamma)."""
    from scipy.special import betaln, digamma, polygamma

    c_ent = 0.1
    c, P, sampler = _adaptive(
        **{
            "sampler.adaptive.entropy_coef": c_ent,
            "sampler.adaptive.entropy_form": form,
            "sampler.adaptive.probe_batch_size": 8,
        }
    )
    x0 = digits(8)
    params = sampler.policy.init(jax.random.PRNGKey(0), x0[:1])
    u = jnp.linspace(0.05, 0.95, 8)
    adv = jnp.linspace(-1.0, 2.0, 8)
    grads = jax.grad(sampler._policy_loss, has_aux=True)(params, x0, u, adv, jnp.ones(8, bool), c_ent)[0]
    head = sorted(k for k in grads["params"] if k.startswith("Dense"))[-1]
    got = np.asarray(grads["params"][head]["bias"])  # [2]: alpha, beta

    a = b = float(np.log1p(np.exp(0.5)) + 1e-5)
    uu, A = np.asarray(u, np.float64), np.asarray(adv, np.float64)
    logp = (a - 1) * np.log(uu) + (b - 1) * np.log1p(-uu) - betaln(a, b)
    H = float(stats.beta(a, b).entropy())
    dlogp = {"a": np.log(uu) - digamma(a) + digamma(a + b), "b": np.log1p(-uu) - digamma(b) + digamma(a + b)}
    dH = {
        "a": -(a - 1) * polygamma(1, a) + (a + b - 2) * polygamma(1, a + b),
        "b": -(b - 1) * polygamma(1, b) + (a + b - 2) * polygamma(1, a + b),
    }
    sig = 1 / (1 + np.exp(-0.5))
    want = []
    for p in ("a", "b"):
        if form == "standard":  # L = -mean(logp A) - c mean(H)
            dL = -dlogp[p] * A / 8 - c_ent * dH[p] / 8
        else:  # L = -mean(logp (A + c H)), H not detached
            dL = -(dlogp[p] * (A + c_ent * H) + logp * c_ent * dH[p]) / 8
        want.append(dL.sum() * sig)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-7)


def test_chunks_draw_their_own_dropout_masks_and_chunking_changes_nothing_else():
    """Three identical rows through a dropout-0.5 network: different values whether chunked (1 row per chunk) or
    not; without dropout, chunked, 8-device and single-call results agree."""
    from training.rows import map_rows

    c, P, _ = _adaptive(**{"model.dropout": 0.5})
    model = make_model(c.model)
    x0 = jnp.repeat(digits(1), 3, axis=0)
    params = jax.tree.map(lambda p: p + 0.05, model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32)))
    t, noise = jnp.full((3,), 400), jnp.repeat(jax.random.normal(jax.random.PRNGKey(1), (1, 8, 8, 1)), 3, axis=0)
    rows_fn = make_rows_fn(model, P)
    for per_device in (0, 1):
        v = np.asarray(rows_fn(params, x0, t, noise, dropout_key=jax.random.PRNGKey(2), rows_per_device=per_device))
        assert len(set(v.tolist())) == 3, (per_device, v)
    plain = [np.asarray(rows_fn(params, x0, t, noise, rows_per_device=k)) for k in (0, 1, 2)]
    np.testing.assert_allclose(plain[1], plain[0], rtol=1e-6)
    np.testing.assert_allclose(plain[2], plain[0], rtol=1e-6)

    # map_rows: 13 rows over 8 devices in chunks of 1 row per device: chunks of 8 rows, the right row for each value
    seen = []

    def fn(chunk, index):
        seen.append(chunk[0].shape[0])
        return chunk[0] * 10.0 + chunk[1]

    rows = (jnp.arange(13.0), jnp.full((13,), 0.5))
    out = jax.jit(lambda r: map_rows(fn, r, num_shards=8, rows_per_device=1))(rows)
    np.testing.assert_allclose(np.asarray(out), np.arange(13.0) * 10 + 0.5)
    assert seen == [8]  # traced once inside lax.map, 8 rows per chunk: 1 per device


def test_uniform_mix_importance_weights_and_the_baseline_by_hand():
    from scipy import stats as st

    B, T = 16, 1000
    c, P, sampler = _adaptive(**{"sampler.adaptive.uniform_mix": 0.25, "sampler.adaptive.importance_weights": True})
    x0 = digits(B)
    state = sampler.init(jax.random.PRNGKey(0), x0)
    frac = []
    for i in range(20):
        t, w, aux = sampler.sample(state, jax.random.PRNGKey(i), x0)
        a, b, t = np.asarray(aux["alpha"], np.float64), np.asarray(aux["beta"], np.float64), np.asarray(t)
        lo, hi = np.clip((t - 0.5) / (T - 1), 0, 1), np.clip((t + 0.5) / (T - 1), 0, 1)
        p = 0.75 * (st.beta.cdf(hi, a, b) - st.beta.cdf(lo, a, b)) + 0.25 / T
        np.testing.assert_allclose(np.asarray(w), 1 / (T * p), rtol=2e-3)
        frac.append(1 - float(np.mean(aux["from_policy"])))
    assert 0.15 < np.mean(frac) < 0.35  # a quarter of the draws uniform (320 draws)

    # the baseline: with a constant reward r, the second update's advantage is r - r = 0, so its loss is 0
    def constant_reward(params, x, t, noise, **kw):
        return jnp.where(params > 0, 0.0, 0.25) * jnp.ones(x.shape[0])  # before - after = 0.25 per row

    for decay, zero_loss in ((0.5, True), (0.0, False)):
        c, P, sampler = _adaptive(
            **{
                "sampler.adaptive.reward_baseline": decay,
                "sampler.adaptive.entropy_coef": 0.0,
                "sampler.adaptive.update_every": 1,
            }
        )
        state = sampler.init(jax.random.PRNGKey(0), x0)
        state, _ = fake_update(sampler, state, x0, constant_reward, key=0)
        assert float(state.reward) == pytest.approx(0.75)  # |S| = 3 rows of 0.25
        state, _ = fake_update(sampler, state, x0, constant_reward, key=1)
        assert (float(state.policy_loss) == 0.0) == zero_loss


def test_geometric_sweep_grid_and_the_policy_density_diagnostics():
    from scipy import stats as st

    from diffusion.gaussian import stratum_edges
    from samplers.policy import bins_mass

    even, geo = np.asarray(sweep_grid(1000, 20)), np.asarray(sweep_grid(1000, 20, "geometric"))
    assert len(even) == len(geo) == 50 and np.all(np.diff(geo) > 0) and geo[-1] < 1000
    assert list(geo[:4]) == [0, 1, 2, 3] and list(geo[1:]) == list(stratum_edges(1000, 49)[:-1])
    # each image's mass per t-bin (t * 10 // 1000) from the Beta CDF at the bins' rounding edges
    a, b = jnp.array([2.0, 0.5]), jnp.array([3.0, 0.7])
    mass = np.asarray(bins_mass(a, b, DiscreteTime(1000).unit_edges(10)))
    edges = np.clip((np.arange(0, 1001, 100) - 0.5) / 999, 0, 1)
    want = np.diff(st.beta.cdf(edges[None], np.array([[2.0], [0.5]]), np.array([[3.0], [0.7]])), axis=1)
    np.testing.assert_allclose(mass, want, rtol=1e-4, atol=1e-6)
    # after an update: the batch's mean density sums to 1; at the initial head every image is alike (spread 0)
    c, P, sampler = _adaptive(**{"sampler.adaptive.density_bins": 10, "sampler.adaptive.update_every": 1})
    x0 = digits(16)
    state, metrics = fake_update(
        sampler, sampler.init(jax.random.PRNGKey(0), x0), x0, lambda p, x, *a, **k: 0 * x[:, 0, 0, 0]
    )
    assert float(np.sum(metrics["policy_density"])) == pytest.approx(1.0, rel=1e-5)
    assert float(metrics["policy_spread"]) == pytest.approx(0.0, abs=1e-6)
