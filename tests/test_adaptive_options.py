"""The learned sampler's options for a reward that carries signal and a policy that moves without collapsing
(docs/method.md#making-the-policy-learn): each against a case computed by hand."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy import stats as st
from test_adaptive import _adaptive, digits, fake_update

from config.validate import ConfigError, validate
from conftest import tiny_config
from diffusion.time import ContinuousTime, DiscreteTime
from samplers.policy import beta_entropy, beta_kl


def per_image_rows(values):
    """A rows_fn whose reward is values[i] per probed row of image i (before - after, rows image-major)."""

    def rows(params, x, t, noise, **kw):  # (the sweep's rows get the same values, wrapped around)
        n = x.shape[0]
        per = jnp.resize(jnp.repeat(values, max(n // values.shape[0], 1)), (n,))
        return jnp.where(params > 0, 0.0, per)  # params_before = 0: the rows' terms; params_after = 1: zero

    return rows


@pytest.mark.parametrize("skip", [0, 1])
def test_strata_cover_the_domain_and_their_weighted_sum_is_unbiased(skip):
    T, n = 1000, 3
    draws = [DiscreteTime(T).strata(jax.random.PRNGKey(i), n, skip) for i in range(4000)]
    t = np.stack([np.asarray(d[0]) for d in draws])
    cells = np.asarray(draws[0][1])
    np.testing.assert_array_equal(cells, [333, 333, 334] if skip == 0 else [333, 333, 333])
    edges = skip + np.concatenate([[0], np.cumsum(cells)])
    assert np.all((t >= edges[:-1]) & (t < edges[1:]))  # one draw in each stratum
    assert t.min() == skip and t.max() == T - 1  # every end reached
    f = lambda x: (x / T) ** 2  # the estimator sum_k cells_k f(t_k) of sum_{t >= skip} f(t)
    est = (f(t) * cells).sum(axis=1)
    want = f(np.arange(skip, T)).sum()
    assert abs(est.mean() - want) < 4 * est.std() / np.sqrt(len(est))
    # continuous time: sum_k cells_k f(t_k) estimates grid * the integral of f over [skip / grid, 1]
    grid = 50
    draws = [ContinuousTime(grid).strata(jax.random.PRNGKey(i), n, skip) for i in range(4000)]
    t = np.stack([np.asarray(d[0]) for d in draws])
    cells = np.asarray(draws[0][1])
    np.testing.assert_allclose(cells, (grid - skip) / n, rtol=1e-6)
    lo = skip / grid
    assert np.all((t >= lo + (1 - lo) * np.arange(n) / n - 1e-6) & (t <= lo + (1 - lo) * np.arange(1, n + 1) / n))
    est = (t**2 * cells).sum(axis=1)
    want = grid * (1 - lo**3) / 3
    assert abs(est.mean() - want) < 4 * est.std() / np.sqrt(len(est))


def test_stratified_reward_weights_each_term_by_its_strata_cells():
    c, P, sampler = _adaptive(**{"sampler.adaptive.selection": "stratified", "sampler.adaptive.update_every": 1})
    x0 = digits(16)

    def rows(params, x, t, noise, **kw):  # before - after = t / 1000 per row
        return jnp.where(params > 0, 0.0, t.astype(jnp.float32) / 1000)

    state, metrics = fake_update(sampler, sampler.init(jax.random.PRNGKey(0), x0), x0, rows)
    S = np.asarray(metrics["S"])
    assert S[0] < 333 <= S[1] < 666 <= S[2] < 1000  # one fresh time per stratum, recorded as S
    cells = np.array([333, 333, 334])
    np.testing.assert_allclose(float(state.reward), np.sum(cells * S / 1000), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(metrics["reward_per_s"]), cells * S / 1000, rtol=1e-5)
    assert int(state.sweep_count) == 1 and not np.any(np.asarray(state.sweep_rows))  # no sweep was pushed
    S2 = np.asarray(fake_update(sampler, state, x0, rows, key=1)[1]["S"])
    assert not np.array_equal(S, S2)  # fresh strata every update


def test_data_end_excluded_from_s_even_when_its_column_makes_the_target():
    """The sweep's t = 0 column is large noise and makes y = sum_tau d_tau: the reference F picks it; with
    data_end=exclude it is never in S (initial S = 1, 2, 3)."""
    B = 16
    x0 = digits(B)
    rng = np.random.default_rng(0)

    def sweep_rows(params, x, t, noise, **kw):  # d_tau per row: huge noise at t = 0, small elsewhere
        n = x.shape[0]
        big = jnp.asarray(rng.normal(size=n).astype(np.float32)) * 100.0
        small = jnp.asarray(rng.normal(size=n).astype(np.float32)) * 0.01
        return jnp.where(params > 0, 0.0, jnp.where(t == 0, big, small))

    for end, has_zero in (("kl", True), ("exclude", False)):
        c, P, sampler = _adaptive(
            **{
                "sampler.adaptive.data_end": end,
                "sampler.adaptive.update_every": 1,
                "sampler.adaptive.select_min_rows": 3,
            }
        )
        state = sampler.init(jax.random.PRNGKey(0), x0)
        np.testing.assert_array_equal(np.asarray(state.probe_times), [0, 1, 2] if end == "kl" else [1, 2, 3])
        for k in range(6):
            state, metrics = fake_update(sampler, state, x0, sweep_rows, key=k)
        assert (0 in np.asarray(metrics["S"]).tolist()) == has_zero


def test_standardised_selection_follows_the_columns_that_move_together():
    """Column 0 is independent noise 1,000 times larger than the rest; columns 5 to 10 share a common factor. The
    raw sum y is column 0, so the reference F ranks it first; the standardised sum is led by the shared factor."""
    c, P, sampler = _adaptive(**{"sampler.adaptive.selection": "fstat_standardised"})
    rng = np.random.default_rng(1)
    n, K = 20, int(sampler.grid.shape[0])
    X = rng.normal(size=(n, K)) * 0.01
    X[:, 0] = rng.normal(size=n) * 10.0
    common = rng.normal(size=n)
    for j in range(5, 11):
        X[:, j] = 0.01 * (common + 0.1 * rng.normal(size=n))
    X = jnp.asarray(X, jnp.float32)
    S, _ = sampler.select(X, jnp.sum(X, axis=1), jnp.int32(n), jnp.zeros(3, jnp.int32))
    assert set(np.asarray(S).tolist()) <= set(np.asarray(sampler.grid)[5:11].tolist())
    c, P, reference = _adaptive()
    S, _ = reference.select(X, jnp.sum(X, axis=1), jnp.int32(n), jnp.zeros(3, jnp.int32))
    assert 0 in np.asarray(S).tolist()


def test_decoder_data_end_probes_the_bounds_own_t0_term():
    from models import make_model

    c, P, sampler = _adaptive(**{"sampler.adaptive.data_end": "decoder", "sampler.adaptive.update_every": 1})
    model = make_model(c.model)
    x0 = digits(16)
    before = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    before = jax.tree.map(lambda p: p + 0.01, before)
    after = jax.tree.map(lambda p: p * 0.9, before)
    seen = {}

    def rows(params, x, t, noise, kind="bound", **kw):
        seen["kind"] = kind
        return jnp.zeros(x.shape[0])

    fake_update(sampler, sampler.init(jax.random.PRNGKey(0), x0), x0, rows)
    assert seen["kind"] == "bound"  # the bound's terms: the discretised decoder at t = 0
    # which, on the chain, is the decoder NLL at t = 0 and the Gaussian KL elsewhere (diffusion/ddpm.py)
    t = jnp.array([0, 0, 5, 5], jnp.int32)
    xs, noise = x0[:4], jax.random.normal(jax.random.PRNGKey(1), x0[:4].shape)
    apply = lambda xt, tt: model.apply(after, xt, tt, None, train=False)
    vb = P.row_terms(apply, xs, t, noise)
    kl = P.row_terms(apply, xs, t, noise, kind="kl")
    np.testing.assert_allclose(np.asarray(vb[2:]), np.asarray(kl[2:]), rtol=1e-6)
    assert np.all(np.abs(np.asarray(vb[:2] - kl[:2])) > 1e-3)
    # no chain, no decoder: refused in one line in continuous time
    from config.fields import override
    from configs.flow import get_config

    flow = override(get_config(), {"sampler.name": "adaptive", "sampler.adaptive.data_end": "decoder"})
    with pytest.raises(ConfigError, match=re.escape("config.sampler.adaptive.data_end='decoder' is not allowed with")):
        validate(flow)


def test_normalised_advantage_is_the_running_mixtures_standard_score():
    d = 0.5
    c, P, sampler = _adaptive(
        **{
            "sampler.adaptive.advantage": "normalised",
            "sampler.adaptive.advantage_decay": d,
            "sampler.adaptive.update_every": 1,
            "sampler.adaptive.entropy_coef": 0.0,
        }
    )
    x0 = digits(16)
    r1 = jnp.linspace(0.0, 7.0, 8) / 3  # per probe image, summed over |S| = 3 rows: 0 .. 7
    r2 = jnp.linspace(10.0, 24.0, 8) / 3
    state = sampler.init(jax.random.PRNGKey(0), x0)
    state, _ = fake_update(sampler, state, x0, per_image_rows(r1), key=0)
    R1 = np.linspace(0, 7, 8)
    assert float(state.adv_mean) == pytest.approx(R1.mean()) and float(state.adv_var) == pytest.approx(R1.var())
    t, _, aux = sampler.sample(state, jax.random.PRNGKey(101), x0)
    new, metrics = fake_update(sampler, state, x0, per_image_rows(r2), key=1)
    R2 = np.linspace(10, 24, 8)
    m = d * R1.mean() + (1 - d) * R2.mean()
    v = d * R1.var() + (1 - d) * R2.var() + d * (1 - d) * (R2.mean() - R1.mean()) ** 2
    assert float(new.adv_mean) == pytest.approx(m, rel=1e-5)
    assert float(new.adv_var) == pytest.approx(v, rel=1e-5)
    assert float(metrics["reward_running_sd"]) == pytest.approx(np.sqrt(v), rel=1e-5)
    # the policy loss is -mean_i log pi(u_i) (R_i - m) / sqrt(v), the probe images every 2nd of the batch
    a, b, u = (np.asarray(aux[k], np.float64)[::2] for k in ("alpha", "beta", "u"))
    want = -np.mean(st.beta.logpdf(np.clip(u, 1e-6, 1 - 1e-6), a, b) * (R2 - m) / np.sqrt(v))
    # (float32 terms of about 0.03 that cancel to 7e-4: an absolute tolerance; a missing or wrong normalisation
    # changes the loss by a factor of the rewards' spread, 4.6)
    assert float(new.policy_loss) == pytest.approx(want, abs=3e-6)
    # with the reference's baseline at the same time: refused
    with pytest.raises(ConfigError, match=re.escape("config.sampler.adaptive.reward_baseline=0.5 is not allowed")):
        validate(
            tiny_config(
                **{
                    "sampler.name": "adaptive",
                    "sampler.adaptive.advantage": "normalised",
                    "sampler.adaptive.reward_baseline": 0.5,
                }
            )
        )


def _policy_at(sampler, state, a_bias, b_bias):
    """The state with the policy's head biases set so that every image gets Beta(softplus(.) + 1e-5 ...)."""
    params = jax.tree.map(lambda v: v, state.policy)
    head = sorted(k for k in params["params"] if k.startswith("Dense"))[-1]
    params["params"][head]["bias"] = jnp.array([a_bias, b_bias], jnp.float32)
    return state.replace(policy=params)


@pytest.mark.parametrize("bias, rises", [((0.5, 0.5), False), ((4.0, -1.0), True)])
def test_entropy_coefficient_rises_below_its_target_and_falls_above(bias, rises):
    lr, target, c0 = 0.5, -0.1, 0.01
    c, P, sampler = _adaptive(
        **{
            "sampler.adaptive.entropy_control": "target",
            "sampler.adaptive.entropy_target": target,
            "sampler.adaptive.entropy_coef_lr": lr,
            "sampler.adaptive.entropy_coef": c0,
            "sampler.adaptive.update_every": 1,
        }
    )
    x0 = digits(16)
    state = _policy_at(sampler, sampler.init(jax.random.PRNGKey(0), x0), *bias)
    new, metrics = fake_update(sampler, state, x0, per_image_rows(jnp.zeros(8)))
    sp = lambda x: np.log1p(np.exp(x)) + 1e-5
    H = st.beta.entropy(sp(bias[0]), sp(bias[1]))  # every image alike (the head's weights are 0)
    assert float(new.entropy) == pytest.approx(H, rel=1e-4, abs=1e-6)
    assert float(metrics["entropy_coef"]) == pytest.approx(c0 * np.exp(-lr * (H - target)), rel=1e-4)
    assert (float(metrics["entropy_coef"]) > c0) == rises


def test_beta_kl_against_numerical_integration():
    for a1, b1, a2, b2 in [(0.974, 0.974, 2.0, 1.0), (3.0, 0.5, 1.2, 1.7), (1.0, 1.0, 0.6, 0.6)]:
        p, q = st.beta(a1, b1), st.beta(a2, b2)
        want = integrate.quad(lambda u: p.pdf(u) * (p.logpdf(u) - q.logpdf(u)), 0, 1, limit=200)[0]
        assert float(beta_kl(a1, b1, a2, b2)) == pytest.approx(want, rel=1e-3)
    # and KL from uniform is minus the entropy: the entropy target is a KL target
    assert float(beta_kl(2.0, 3.0, 1.0, 1.0)) == pytest.approx(-float(beta_entropy(2.0, 3.0)), rel=1e-5)


def test_trust_region_bounds_the_kl_between_consecutive_policies():
    """A large policy step (lr 1, a reward of 1 only for draws near t = 0) moves the policy far in one update;
    with trust_kl the probe images' mean KL(old || new) is at most trust_kl and the step points the same way."""
    x0 = digits(16)
    xp = x0[::2]

    def rows_fn_for(sampler, state):
        u = sampler.sample(state, jax.random.PRNGKey(100), x0)[2]["u"]  # fake_update's draw (key 0)
        return per_image_rows(jnp.where(u[::2] < 0.3, 1.0, 0.0) / 3)

    kls, means = {}, {}
    for trust in (0.0, 0.01):
        c, P, sampler = _adaptive(
            **{
                "sampler.adaptive.policy_lr": 1.0,
                "sampler.adaptive.trust_kl": trust,
                "sampler.adaptive.update_every": 1,
                "sampler.adaptive.entropy_coef": 0.0,
            }
        )
        state = sampler.init(jax.random.PRNGKey(0), x0)
        new, metrics = fake_update(sampler, state, x0, rows_fn_for(sampler, state))
        a0, b0 = sampler.policy.apply(state.policy, xp)
        a1, b1 = sampler.policy.apply(new.policy, xp)
        kls[trust] = float(np.mean(np.asarray(beta_kl(a0, b0, a1, b1))))
        means[trust] = float(np.mean(np.asarray(a1 / (a1 + b1))))
        if trust:
            assert float(metrics["step_kl"]) == pytest.approx(kls[trust], rel=1e-4)
            assert float(metrics["step_scale"]) < 1.0
    assert kls[0.0] > 0.05  # the unconstrained step is large
    assert kls[0.01] <= 0.01 + 1e-6 and kls[0.01] > 0.001  # bounded, and not a null step
    assert means[0.01] < 0.487  # towards small t (from 0.5), as the unconstrained step
    assert means[0.0] < means[0.01]


def test_uniform_floor_keeps_every_timestep_and_the_weights_unbiased():
    """uniform_mix = eps with importance weights: p(t) = (1 - eps) pi(t) + eps / T >= eps / T for every t, p sums
    to 1 and is the distribution t is drawn from, and E_p[w(t) f(t)] = mean_t f(t), for a policy far from uniform."""
    T, eps = 1000, 0.1
    c, P, sampler = _adaptive(**{"sampler.adaptive.uniform_mix": eps, "sampler.adaptive.importance_weights": True})
    x0 = digits(16)
    state = _policy_at(sampler, sampler.init(jax.random.PRNGKey(0), x0), 4.0, -2.0)  # Beta(4.0, 0.13): t near T
    a, b = sampler.policy.apply(state.policy, x0[:1])
    all_t = jnp.arange(T, dtype=jnp.int32)
    w = np.asarray(sampler.importance_weights(jnp.repeat(a, T), jnp.repeat(b, T), all_t), np.float64)
    p = 1.0 / (T * w)
    assert p.min() >= eps / T * (1 - 1e-6) and p.sum() == pytest.approx(1.0, rel=1e-4)
    assert p[:500].sum() < 0.06  # the policy alone would give the first half almost nothing
    f = np.sin(np.arange(T) / 50.0) + 2
    assert np.sum(p * w * f) == pytest.approx(f.mean(), rel=1e-4)
    draws = np.concatenate([np.asarray(sampler.sample(state, jax.random.PRNGKey(i), x0)[0]) for i in range(300)])
    counts = np.bincount(draws // 100, minlength=10)
    expected = np.add.reduceat(p, np.arange(0, T, 100))
    expected = expected / expected.sum() * len(draws)
    assert st.chisquare(counts, expected).pvalue > 1e-3


def test_diagnostics_by_hand():
    c, P, sampler = _adaptive(**{"sampler.adaptive.diagnostics": True, "sampler.adaptive.update_every": 1})
    x0 = digits(16)
    rng = np.random.default_rng(3)
    values = jnp.asarray(rng.normal(size=(8, 3)).astype(np.float32))  # d_{i,s} per probe image and s

    def rows(params, x, t, noise, **kw):  # the probe's 24 rows (the sweep's 20 get the first 20)
        return jnp.where(params > 0, 0.0, jnp.resize(values.reshape(-1), (x.shape[0],)))

    state, metrics = fake_update(sampler, sampler.init(jax.random.PRNGKey(0), x0), x0, rows)
    d = np.asarray(values, np.float64)
    R = d.sum(1)
    np.testing.assert_allclose(np.asarray(metrics["reward_per_image"]), R, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(metrics["reward_sd_per_s"]), d.std(0), rtol=1e-5)
    share = [np.cov(d[:, s], R, bias=True)[0, 1] / R.var() for s in range(3)]
    np.testing.assert_allclose(np.asarray(metrics["reward_share_per_s"]), share, rtol=1e-4)
    assert float(np.sum(metrics["reward_share_per_s"])) == pytest.approx(1.0, rel=1e-5)
    snr = np.asarray(metrics["grad_snr"])
    assert snr.shape == (len(state.policy["params"]),) and np.all(np.isfinite(snr)) and np.all(snr >= 0)
    # at the initial head (weights 0) only the head gets gradients: the layers below it have none (SNR 0)
    assert sorted(state.policy["params"]) == ["Conv_0", "Conv_1", "Dense_0", "Dense_1"]
    np.testing.assert_array_equal(snr[:3], 0.0)
    assert snr[3] > 0
    assert float(metrics["entropy_to_reward_grad"]) > 0
    # the default keeps its state's layout: no array of any option
    c, P, default = _adaptive()
    present = lambda s: {f.name for f in dataclasses.fields(s) if getattr(s, f.name) is not None}
    assert present(default.init(jax.random.PRNGKey(0), x0)) == present(state) - {"diag"}


@pytest.mark.slow  # over 20 s: CI's second job
def test_credit_reward_is_each_images_gradient_alignment_with_the_bound():
    """reward=credit: C[i, s] = <grad l_i, grad KL_s> at theta_k, computed here with two reverse-mode gradients and a
    dot product (the sampler uses one forward-mode pass), and a small step on image i's loss lowers KL_s by eps C."""
    from models import make_model
    from samplers import StepContext
    from training.step import make_rows_fn

    c, P, sampler = _adaptive(
        **{
            "sampler.adaptive.reward": "credit",
            "sampler.adaptive.selection": "stratified",
            "sampler.adaptive.update_every": 1,
            "sampler.adaptive.probe_dropout": False,
            "model.dropout": 0.0,
        }
    )
    model = make_model(c.model)
    x0 = digits(16)
    params = model.init(jax.random.PRNGKey(0), x0[:1], jnp.zeros((1,), jnp.int32))
    params = jax.tree.map(lambda p: p + 0.02 * jax.random.normal(jax.random.PRNGKey(5), p.shape), params)
    apply = lambda p: lambda xt, tt: model.apply(p, xt, tt, None, train=False)

    def objective(p, x, t, noise, key, y=None):
        mse, extra = P.bind(p).example_losses(apply(p), x, t, noise)
        return mse + extra, mse

    rows_fn = make_rows_fn(model, P)
    xp, tp = x0[:4], jnp.array([10, 300, 600, 900], jnp.int32)
    ts, key = jnp.array([5, 400], jnp.int32), jax.random.PRNGKey(9)
    ctx = StepContext(
        step=jnp.int32(0),
        key=key,
        x0=x0,
        t=jnp.zeros(16, jnp.int32),
        aux={},
        losses=jnp.zeros(16),
        params_before=params,
        params_after=params,
        rows_fn=rows_fn,
        objective=objective,
    )
    C = np.asarray(jax.jit(lambda: sampler._credit(ctx, xp, None, tp, ts, key))())
    k_rows, _, k_loss, _ = jax.random.split(key, 4)
    loss_noise = jax.random.normal(k_loss, xp.shape)

    def kl(p, s):
        noise = jax.random.normal(jax.random.fold_in(k_rows, s), xp.shape)
        return jnp.mean(P.row_terms(apply(p), xp, jnp.full((4,), ts[s]), noise, kind="kl"))

    dot = lambda a, b: sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    # each image's gradient (one row per image) and each stratum's bound gradient, by reverse mode, compiled once
    g_images = jax.jit(jax.jacrev(lambda p: objective(p, xp, tp, loss_noise, None)[0]))(params)
    g_bounds = jax.jit(jax.vmap(jax.grad(kl), in_axes=(None, 0)))(params, jnp.arange(2))
    row = lambda tree, i: jax.tree.map(lambda g: g[i], tree)
    for s in range(2):
        for i in range(4):
            assert C[i, s] == pytest.approx(float(dot(row(g_images, i), row(g_bounds, s))), rel=2e-3, abs=1e-9)
    # to first order a step of eps along image 2's gradient changes KL_1 by eps C[2, 1] (a central difference)
    g2 = row(g_images, 2)
    eps = 1e-2 / max(float(np.sqrt(dot(g2, g2))), 1e-12)
    moved = lambda sign: jax.tree.map(lambda p, g: p + sign * eps * g, params, g2)
    kl1 = jax.jit(lambda p: kl(p, 1))
    slope = float(kl1(moved(1)) - kl1(moved(-1))) / (2 * eps)
    assert slope == pytest.approx(C[2, 1], rel=0.02)
    # the policy update runs with it, and with selection other than stratified it is refused
    state, metrics = jax.jit(lambda st: sampler.update(st, dataclasses.replace(ctx, aux=_aux(sampler, st, x0))))(
        sampler.init(jax.random.PRNGKey(0), x0)
    )
    assert np.isfinite(float(state.reward)) and float(state.reward) != 0.0
    with pytest.raises(ConfigError, match=re.escape("config.sampler.adaptive.selection='fstat' is not allowed")):
        validate(tiny_config(**{"sampler.name": "adaptive", "sampler.adaptive.reward": "credit"}))


def _aux(sampler, state, x0):
    return sampler.sample(state, jax.random.PRNGKey(2), x0)[2]
