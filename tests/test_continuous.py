"""Continuous-time processes (VDM's VP, flow matching) and the samplers and weightings in continuous time: closed
forms at hand-computed points, VDM's ELBO terms, the ODE likelihood and ODE sampling on Gaussian data (where the
optimal network and the exact density are known), the learned sampler's draws without rounding, validation, and an
exact resume of a flow run with the learned sampler."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from config.fields import ConfigError, override
from conftest import TINY, full_and_resumed
from diffusion import likelihood
from diffusion.flow import Flow
from diffusion.gaussian import LN2
from diffusion.vp import VP

# -- closed forms at hand-computed points --------------------------------------------------------------------------


def test_flow_interpolant_target_and_loss_at_hand_points():
    p = Flow()
    x0, eps, t = jnp.full((1, 1, 1, 1), 0.5), jnp.full((1, 1, 1, 1), -1.0), jnp.array([0.25])
    assert float(p.q_sample(x0, t, eps).squeeze()) == pytest.approx(0.75 * 0.5 + 0.25 * -1.0)  # 0.125
    assert float(p.training_target(x0, t, eps).squeeze()) == pytest.approx(-1.5)  # eps - x0
    seen = []

    def net(x, nt):
        seen.append(float(nt[0]))
        return jnp.full_like(x, 0.5)

    mse, extra = p.example_losses(net, x0, t, eps)
    assert float(mse[0]) == pytest.approx((0.5 + 1.5) ** 2) and float(extra[0]) == 0.0
    assert seen == [250.0]  # the network sees 1000 t
    # SiT's convention: the network sees 1 - t (unscaled here) and returns x0 - eps
    sit = Flow(time_direction="data_at_1", time_scale=1.0)
    seen.clear()
    mse = sit.example_mse(net, x0, t, eps)
    assert seen == [0.75] and float(mse[0]) == pytest.approx((-0.5 + 1.5) ** 2)
    # the ELBO integrand of a velocity error: -1/2 lambda' (1 - t)^2 |v - v_hat|^2 = (1 - t) / t |v - v_hat|^2
    xt = p.q_sample(x0, t, eps)
    got = p.elbo_integrand(xt, t, eps, jnp.full_like(xt, 0.5))
    assert float(got[0]) == pytest.approx(0.75 / 0.25 * 2.0**2 / LN2, rel=1e-5)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_vp_schedule_ends_variance_preserving_and_inverses(schedule):
    p = VP(schedule=schedule)
    t = jnp.linspace(0.0, 1.0, 11)
    lam = p.logsnr(t)
    np.testing.assert_allclose([lam[0], lam[-1]], [13.3, -5.0], atol=1e-4)
    assert bool(jnp.all(jnp.diff(lam) < 0))
    a, s = p.alpha_sigma(t)
    np.testing.assert_allclose(a**2 + s**2, 1.0, atol=1e-6)
    np.testing.assert_allclose(jnp.log(a**2 / s**2), lam, atol=2e-4)
    np.testing.assert_allclose(p.t_of_logsnr(lam), t, atol=1e-5)
    np.testing.assert_allclose(p.t_of_sigma(s), t, atol=1e-4)
    # lambda' by forward-mode differentiation against a central difference
    tm = jnp.array([0.3, 0.6])
    fd = (p.logsnr(tm + 1e-3) - p.logsnr(tm - 1e-3)) / 2e-3
    np.testing.assert_allclose(p.dlogsnr(tm), fd, rtol=1e-3)


@pytest.mark.parametrize(
    "process",
    [VP(schedule="linear", target="eps"), VP(schedule="cosine", target="v"), VP(target="x0"), Flow()],
    ids=lambda p: f"{p.name}-{p.target}",
)
def test_predict_inverts_the_target(process):
    """An output equal to the target gives back x0 and eps exactly, and the ODE velocity alpha' x0 + sigma' eps."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    x0, eps = jax.random.normal(k1, (3, 2, 2, 1)), jax.random.normal(k2, (3, 2, 2, 1))
    t = jnp.array([0.1, 0.5, 0.9])
    xt = process.q_sample(x0, t, eps)
    out = process.training_target(x0, t, eps)
    x0_hat, eps_hat = process.predict(xt, t, out)
    np.testing.assert_allclose(x0_hat, x0, atol=2e-4)
    np.testing.assert_allclose(eps_hat, eps, atol=2e-4)
    _, _, da, ds = process.coefs(t)
    np.testing.assert_allclose(
        process.velocity(xt, t, out), da[:, None, None, None] * x0 + ds[:, None, None, None] * eps, atol=5e-4
    )


# -- VDM's ELBO --------------------------------------------------------------------------------------------------


def test_vdm_prior_and_reconstruction_against_closed_forms():
    p = VP()
    x0 = jnp.asarray(np.arange(256, dtype=np.float32).reshape(4, 8, 8, 1) / 127.5 - 1.0)
    a1sq, s1sq = 1 / (1 + math.exp(5.0)), 1 / (1 + math.exp(-5.0))  # sigmoid(-5), sigmoid(5)
    x = np.asarray(x0, np.float64)
    prior = np.mean(0.5 * (a1sq * x**2 + s1sq - math.log(s1sq) - 1.0), axis=(1, 2, 3)) / math.log(2)
    np.testing.assert_allclose(p.prior_bpd(x0), prior, rtol=1e-5)
    # reconstruction: a numpy softmax over the 256 values with the same noise
    key = jax.random.PRNGKey(3)
    ratio = math.exp(-13.3 / 2)  # sigma_0 / alpha_0
    z = x + ratio * np.asarray(jax.random.normal(key, x0.shape), np.float64)
    values = np.arange(256) / 127.5 - 1.0
    logits = -0.5 * ((z[..., None] - values) / ratio) ** 2
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    k = np.round((x + 1) * 127.5).astype(int)
    rec = -np.take_along_axis(logp, k[..., None], -1)[..., 0].mean(axis=(1, 2, 3)) / math.log(2)
    np.testing.assert_allclose(p.reconstruction_bpd(x0, key), rec, rtol=1e-4, atol=2e-6)
    # at logsnr_max = 13.3, sigma_0 / alpha_0 = 0.0013 is a third of a bin's half-width: a few hundredths of a bit
    assert float(jnp.max(p.reconstruction_bpd(x0, key))) < 0.05


def gaussian_eps_net(process, s):
    """The optimal eps-prediction for x0 ~ N(0, s^2 I): E[eps | x_t] = sigma x_t / (alpha^2 s^2 + sigma^2)."""

    def net(x, nt):
        a, sig = process.alpha_sigma(nt / process.time_scale)
        a, sig = a[:, None, None, None], sig[:, None, None, None]
        return sig * x / (a**2 * s**2 + sig**2)

    return net


def test_vdm_diffusion_loss_of_the_optimal_network_on_gaussian_data():
    """x0 ~ N(0, s^2 I) with the optimal eps-prediction: the diffusion loss is
    1/2 int E|eps - eps_hat|^2 (-dlambda) = 1/2 [log(1 + s^2 e^lambda)] from lambda_min to lambda_max per dimension,
    the same for every schedule with these ends (VDM's invariance): stratified in log SNR, the estimate itself is
    the same for both schedules."""
    s = 0.5
    x0 = s * jax.random.normal(jax.random.PRNGKey(1), (64, 4, 4, 1))
    got = {}
    for schedule in ("linear", "cosine"):
        p = VP(schedule=schedule)
        got[schedule] = p.diffusion_loss(gaussian_eps_net(p, s), x0, jax.random.PRNGKey(2), 200)
    exact = 0.5 * (math.log1p(s**2 * math.exp(13.3)) - math.log1p(s**2 * math.exp(-5.0))) / LN2
    assert float(jnp.mean(got["linear"])) == pytest.approx(exact, rel=0.01)
    np.testing.assert_allclose(got["cosine"], got["linear"], rtol=2e-3)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_vdm_stratified_elbo_with_its_standard_error_on_gaussian_data(schedule):
    """eval.bound_strata on VP (nll_bpd_strata, the summary of evaluation/bound.py): x0 ~ N(0, s^2 I) with the
    optimal eps-prediction, E_eps|eps - eps_hat|^2 = (u^2 s^4 + u x^2) / (1 + u s^2)^2 per dimension at SNR u, so
    the diffusion loss given x0, 1/2 int ... du / u, is 1/2 [log(1 + s^2 u) + (1 - x^2 / s^2) / (1 + s^2 u)] from
    u = e^-5 to e^13.3. Over 40 draws of 8 cells x 4 times the diffusion strata's mean equals it to within 3
    reported standard errors of that mean, and the reported standard error is their spread to within 1.5x; the
    prior is the exact term; the reconstruction is left out (not in the closed form: Gaussian x0 is off the
    decoder's 256 values)."""
    from evaluation.bound import strata_summary

    s = 0.5
    x0 = s * jax.random.normal(jax.random.PRNGKey(1), (64, 4, 4, 1))
    p = VP(schedule=schedule)
    fn = jax.jit(lambda k: p.nll_bpd_strata(gaussian_eps_net(p, s), x0, *jax.random.split(k), 8, 4, 2))
    x2 = np.asarray(x0, np.float64) ** 2 / s**2
    F = lambda u: 0.5 * (math.log1p(s**2 * u) + (1 - x2) / (1 + s**2 * u))
    exact = float(np.mean(F(math.exp(13.3)) - F(math.exp(-5.0)))) / LN2
    value, se = [], []
    for k in jax.random.split(jax.random.PRNGKey(2), 40):
        rec, parts, prior = fn(k)
        np.testing.assert_allclose(prior, p.prior_bpd(x0), rtol=1e-6)
        assert rec.shape == (64, 2) and parts.shape == (64, 8, 4) and bool(jnp.all(rec >= 0))  # z_0's decoder, bits
        _, v, e = strata_summary(np.zeros((64, 2)), parts, np.zeros(64))
        value.append(v)
        se.append(e)
    value, reported = np.array(value), np.sqrt(np.mean(np.square(se)))
    assert abs(value.mean() - exact) < 3 * reported / np.sqrt(len(value)), (value.mean(), exact, reported)
    assert 1 / 1.5 < reported / value.std(ddof=1) < 1.5, (reported, value.std(ddof=1))


# -- the ODE: likelihood and sampling on Gaussian data ---------------------------------------------------------


def gaussian_velocity_net(mu, s):
    """Flow matching's optimal velocity for x0 ~ N(mu, s^2 I): the marginal at t is N((1 - t) mu, v(t) I),
    v = (1 - t)^2 s^2 + t^2, and the field that transports it is m' + (sd' / sd)(x - m)."""

    def net(x, nt):
        t = (nt / 1000.0)[:, None, None, None]
        m, sd = (1 - t) * mu, jnp.sqrt((1 - t) ** 2 * s**2 + t**2)
        dsd = (-(1 - t) * s**2 + t) / sd
        return -mu + dsd / sd * (x - m)

    return net


def test_ode_likelihood_equals_the_gaussian_log_density():
    mu, s = 0.3, 0.6
    p = Flow()
    x = mu + s * jax.random.normal(jax.random.PRNGKey(0), (256, 2, 2, 1))
    exact = -stats.norm(mu, s).logpdf(np.asarray(x)).sum(axis=(1, 2, 3)) / (4 * LN2)
    net = gaussian_velocity_net(mu, s)
    # Hutchinson: unbiased per image, exact on average; per image within its probe's spread
    got = p.ode_nll_bpd(net, x, jax.random.PRNGKey(1), steps=64, dequantize=False)
    err = np.asarray(got) - exact
    assert abs(err.mean()) < 3 * err.std() / math.sqrt(len(err)) + 2e-3
    # the exact trace: equal per image to the solver's accuracy

    def field(xt, t):
        tb = jnp.full(xt.shape[:1], t, jnp.float32)
        return p.velocity(xt, tb, p.run(net, xt, tb))

    logp = likelihood.ode_log_likelihood(field, x[:16], None, 64, exact_trace=True)
    np.testing.assert_allclose(-np.asarray(logp) / (4 * LN2), exact[:16], atol=2e-3)


@pytest.mark.parametrize("method", ["euler", "heun", "ancestral"])
def test_sampling_reaches_the_gaussian_data(method):
    """From N(0, I) at t = 1 with the optimal velocity, the samples at t = 0 have the data's mean and spread
    (Heun: 2 steps - 1 network evaluations)."""
    mu, s = 0.3, 0.6
    p = Flow()
    calls = []
    net = gaussian_velocity_net(mu, s)
    counting = lambda x, nt: (calls.append(1), net(x, nt))[1]
    x = p.sample(counting, jax.random.PRNGKey(0), (4096, 2, 2, 1), method, 40, clip=False)
    assert len(calls) in (1, 2)  # traced once (scan), Heun's correction once more under cond
    assert p.sampling_steps(method, 40) == (79 if method == "heun" else 40)
    assert float(jnp.mean(x)) == pytest.approx(mu, abs=0.02)
    # ancestral steps with the posterior mean as x0 lose variance with few steps (0.561 at 40 steps, 0.589 at 200)
    assert float(jnp.std(x)) == pytest.approx(s, rel={"euler": 0.06, "heun": 0.03, "ancestral": 0.08}[method])


@pytest.mark.parametrize("method", ["heun", "ancestral"])
def test_vp_sampling_from_the_eps_prediction_reaches_the_gaussian_data(method):
    """VP (cosine) with the optimal eps-prediction for x0 ~ N(0, s^2 I): the ODE velocity and the ancestral chain,
    both through `predict`, end at the data's spread (started from N(0, I), the t = 1 marginal to 0.5%)."""
    s = 0.6
    p = VP(schedule="cosine")
    x = p.sample(gaussian_eps_net(p, s), jax.random.PRNGKey(0), (4096, 2, 2, 1), method, 40, clip=False)
    assert abs(float(jnp.mean(x))) < 0.02
    assert float(jnp.std(x)) == pytest.approx(s, rel=0.03 if method == "heun" else 0.08)


# -- samplers and weightings in continuous time ------------------------------------------------------------------


def make(name, process, **fields):
    from config.schema import default_config
    from samplers import make_sampler

    c = default_config(sampler=name).sampler
    for k, v in fields.items():
        c[name][k] = v
    return make_sampler(c, process, 64)


def test_learned_sampler_draws_t_without_rounding_and_its_log_probability():
    from samplers.policy import beta_log_prob

    s = make("adaptive", Flow(), policy_channels=(4,), policy_hidden=(8,))
    x0 = jax.random.normal(jax.random.PRNGKey(0), (64, 8, 8, 1))
    state = s.init(jax.random.PRNGKey(1), x0)
    t, w, aux = s.sample(state, jax.random.PRNGKey(2), x0)
    assert t.dtype == jnp.float32
    np.testing.assert_array_equal(t, aux["u"])  # t = u itself
    assert len(np.unique(np.asarray(t))) == 64 and bool(jnp.all((t > 0) & (t < 1)))
    np.testing.assert_array_equal(w, 1.0)
    a, b = np.asarray(aux["alpha"], np.float64), np.asarray(aux["beta"], np.float64)
    np.testing.assert_allclose(a, math.log1p(math.exp(0.5)) + 1e-5, rtol=1e-6)  # the heads' initial bias
    np.testing.assert_allclose(beta_log_prob(t, aux["alpha"], aux["beta"]), stats.beta(a, b).logpdf(t), atol=1e-6)
    np.testing.assert_allclose(s.grid[:3], [0.01, 0.03, 0.05], rtol=1e-6)  # 50 cell midpoints of [0, 1]
    np.testing.assert_allclose(state.probe_times, s.grid[:3])
    geo = make("adaptive", Flow(), sweep_grid="geometric").grid
    lam = Flow().logsnr(geo)
    np.testing.assert_allclose(jnp.diff(lam), jnp.diff(lam)[0], rtol=1e-3)  # even in log SNR
    assert s.cfg.reward == "bound"
    iw = make("adaptive", Flow(), importance_weights=True, policy_channels=(4,), policy_hidden=(8,))
    t, w, aux = iw.sample(state, jax.random.PRNGKey(2), x0)
    np.testing.assert_allclose(w, 1 / stats.beta(a, b).pdf(np.asarray(t)), rtol=1e-4)


@pytest.mark.parametrize("process", [Flow(), VP(schedule="cosine")], ids=["flow", "vp-cosine"])
def test_logitnormal_and_lognormal_in_continuous_time(process):
    x0 = jnp.zeros((20000, 1, 1, 1))
    t, w, _ = make("logitnormal", process, mean=0.5, std=0.8).sample({}, jax.random.PRNGKey(0), x0)
    _, sig = process.alpha_sigma(t)
    z = np.log(np.asarray(sig) / (1 - np.asarray(sig)))  # logit of the noise coefficient
    inside = (t > 1e-4) & (t < 1 - 1e-4)  # VP clips beyond its schedule's ends
    assert (
        stats.kstest(z[np.asarray(inside)], stats.truncnorm.cdf, args=_trunc(z[np.asarray(inside)], 0.5, 0.8)).pvalue
        > 1e-3
    )
    t, w, _ = make("lognormal", process).sample({}, jax.random.PRNGKey(1), x0)
    log_sigma = -0.5 * np.asarray(process.logsnr(t))  # EDM's ln sigma = -1/2 log SNR
    inside = np.asarray((t > 1e-4) & (t < 1 - 1e-4))
    assert stats.kstest(log_sigma[inside], stats.truncnorm.cdf, args=_trunc(log_sigma[inside], -1.2, 1.2)).pvalue > 1e-3


def _trunc(x, m, s):
    """truncnorm's arguments for N(m, s^2) truncated to the observed range (VP clips the tails to its ends)."""
    return ((x.min() - m) / s, (x.max() - m) / s, m, s)


def test_weightings_on_log_snr_at_hand_points():
    from config.schema import default_config
    from weightings import make_weighting

    def w(name, process, t, **fields):
        c = default_config(weighting=name).weighting
        for k, v in fields.items():
            c[name][k] = v
        return float(make_weighting(c, process)(jnp.array([t]))[0])

    # flow, velocity target, t = 0.25: SNR = (0.75 / 0.25)^2 = 9
    assert w("min_snr", Flow(), 0.25) == pytest.approx(5 * 0.25**2)  # min(SNR, 5) t^2
    assert w("p2", Flow(), 0.25) == pytest.approx(9 * 0.25**2 / (1 + 9))  # SNR t^2 / (k + SNR)
    assert w("none", Flow(), 0.25) == 1.0
    # VP with the eps target: the discrete forms, min(SNR, 5) / SNR and 1 / (1 + SNR)
    p = VP()
    snr = math.exp(float(p.logsnr(jnp.array([0.5]))[0]))
    assert w("min_snr", p, 0.5) == pytest.approx(min(snr, 5) / snr, rel=1e-5)
    assert w("p2", p, 0.5) == pytest.approx(1 / (1 + snr), rel=1e-5)
    assert w("min_snr", Flow(), 0.0) == 0.0 and w("min_snr", Flow(), 1.0) == 0.0  # finite at both ends


# -- VDM's learned schedule ------------------------------------------------------------------------------------


def test_learned_schedule_starts_linear_stays_monotone_and_needs_its_parameters():
    p = VP(schedule="learned")
    variables = p.init_params(jax.random.PRNGKey(0), {"params": {}})
    t = jnp.linspace(0.0, 1.0, 101)
    with pytest.raises(ValueError, match="bind"):
        p.logsnr(t)
    b = p.bind(variables)
    np.testing.assert_allclose(
        b.logsnr(t), VP(schedule="linear").logsnr(t), atol=0.02
    )  # l1 = linear, the rest ~ N(0, 1e-4)
    # any parameters give an increasing gamma (non-negative weights): scramble them
    leaves, tree = jax.tree.flatten(variables["schedule"])
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    noisy = jax.tree.unflatten(tree, [3 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
    gamma = p.bind({"schedule": noisy}).gamma(t)
    assert bool(jnp.all(jnp.diff(gamma) >= 0))
    # VDM's network input: the normalised gamma, t itself at the linear start
    np.testing.assert_allclose(b.net_time(t) / 1000.0, t, atol=2e-3)


# -- validation and an exact resume ------------------------------------------------------------------------------


def flow_config(arg="", **overrides):
    from configs.flow import get_config

    tiny = {k: v for k, v in TINY.items() if not k.startswith("sample.method")}
    return override(get_config(arg), {**tiny, "sample.method": "euler", **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sampler.name": "speed"}, "config.sampler.name='speed' is not allowed with the continuous-time process"),
        ({"weighting.name": "speed"}, "config.weighting.name='speed' is not allowed with the continuous-time"),
        ({"sample.method": "ddim"}, "config.sample.method='ddim' is not allowed with config.diffusion.name='flow'"),
        ({"diffusion.logsnr_min": 20.0}, "config.diffusion.logsnr_min=20.0 is not allowed: must be below"),
        (
            {"diffusion.schedule": "learned", "sampler.name": "logitnormal"},
            "config.sampler.name='logitnormal' is not allowed with config.diffusion.schedule='learned'",
        ),
        (
            {"diffusion.schedule": "learned", "weighting.name": "min_snr"},
            "config.weighting.name='min_snr' is not allowed with config.diffusion.schedule='learned'",
        ),
        (
            {"diffusion.schedule": "learned"},
            "config.sampler.adaptive.importance_weights=False is not allowed with config.diffusion.schedule='learned'",
        ),
        (
            {"eval.bound_strata": 50},
            "config.eval.bound_strata=50 is not allowed: must be 0 (the full computation): the likelihood is the "
            "probability-flow ODE's, not a sum over t (config.diffusion.name='flow')",
        ),
    ],
)
def test_validation_refuses_what_has_no_meaning_in_continuous_time(overrides, message):
    from config.validate import check_values

    arg = "vp" if any(k.startswith("diffusion.") for k in overrides) else ""
    with pytest.raises(ConfigError) as e:
        check_values(flow_config(arg, **overrides))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_new_samplers_needs_are_checked_by_what_it_declares():
    """A sampler defined here that needs no inverse is allowed with VDM's learned schedule (no list of names to
    edit); one that inverts the schedule is refused in one line, the allowed samplers computed from the declared
    needs."""
    from config.validate import check_values
    from samplers import SAMPLERS
    from samplers.uniform import UniformSampler

    class PlainSampler(UniformSampler):
        name = "test_plain"

    class InvertingSampler(UniformSampler):
        name = "test_inverting"
        inverts = True

    for cls in (PlainSampler, InvertingSampler):
        SAMPLERS.register(cls)
    try:
        over = {"diffusion.schedule": "learned"}
        check_values(flow_config("vp", **over, **{"sampler.name": "test_plain"}))
        with pytest.raises(ConfigError) as e:
            check_values(flow_config("vp", **over, **{"sampler.name": "test_inverting"}))
        assert str(e.value) == (
            "config.sampler.name='test_inverting' is not allowed with config.diffusion.schedule='learned': the "
            "learned schedule has no inverse to map noise levels to times; use one of adaptive, antithetic, beta, "
            "loss_second_moment, test_plain, uniform"
        )
    finally:
        for cls in (PlainSampler, InvertingSampler):
            SAMPLERS.unregister(cls.name)


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_flow_resume_with_the_learned_sampler_is_exact(tmp_path):
    """6 steps in one go equal 3, a real orbax checkpoint and 3 more, the policy's state included."""

    _, full, resumed = full_and_resumed(flow_config(), tmp_path)
    chex.assert_trees_all_equal(full, resumed)
    assert int(full.sampler_state.updates) == 3  # steps 0, 2, 4 updated the policy
    assert float(full.sampler_state.reward) != 0.0


def test_learned_schedule_interior_descends_the_bound_only_with_importance_weights():
    """VDM's invariance: for fixed x0 and eps the diffusion loss integrated over uniform t depends on the schedule only
    through its ends, so the interior's expected gradient is zero. With t from the learned sampler's Beta density
    that holds only with its importance weights: two schedules with the same ends and different interiors give
    the same importance-weighted expectation (the sampler's own weights), different unweighted ones."""
    from diffusion import make_process
    from samplers import make_sampler

    c = flow_config("vp", **{"diffusion.schedule": "learned", "sampler.adaptive.importance_weights": True})
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 16)
    s1 = process.noise_net.init(jax.random.PRNGKey(0), jnp.zeros((1,)))["params"]
    ends = lambda s: np.asarray(process.bind({"schedule": s}).gamma(jnp.array([0.0, 1.0])), np.float64)
    # another interior (steeper in the middle), then the linear part set so that both ends stay where they were
    s2 = dict(s1, DenseMonotone_1={"bias": jnp.linspace(-20, 20, 1024), "kernel": jnp.full((1, 1024), 40.0)})
    s2["DenseMonotone_2"] = {"kernel": jnp.full((1024, 1), 3.0)}
    zero = {"bias": jnp.zeros(1), "kernel": jnp.zeros((1, 1))}
    g, want = ends(dict(s2, DenseMonotone_0=zero)), ends(s1)
    k, b = (want[1] - want[0]) - (g[1] - g[0]), want[0] - g[0]
    s2["DenseMonotone_0"] = {"bias": jnp.array([b], jnp.float32), "kernel": jnp.array([[k]], jnp.float32)}
    np.testing.assert_allclose(ends(s2), want, atol=1e-4)
    mid = jnp.array([0.2])
    assert abs(float(process.bind({"schedule": s2}).gamma(mid)[0] - process.bind({"schedule": s1}).gamma(mid)[0])) > 1

    N = 8000
    t = (jnp.arange(N, dtype=jnp.float32) + 0.5) / N  # midpoint rule over [0, 1]
    x0 = jnp.repeat(jax.random.uniform(jax.random.PRNGKey(1), (1, 4, 4, 1), minval=-1, maxval=1), N, 0)
    noise = jnp.repeat(jax.random.normal(jax.random.PRNGKey(2), (1, 4, 4, 1)), N, 0)
    net = lambda xt, nt: jnp.tanh(0.7 * xt + 0.002 * nt[:, None, None, None] - 0.5)  # sees the normalised gamma
    a, b = jnp.full((N,), 1.2), jnp.full((N,), 1.4)
    pdf = np.asarray(stats.beta(1.2, 1.4).pdf(np.asarray(t)), np.float64)
    w = np.asarray(sampler.importance_weights(a, b, t), np.float64)

    def expectations(s):
        d = np.asarray(process.bind({"schedule": s}).example_losses(net, x0, t, noise)[0], np.float64)
        return d.mean(), (pdf * d).mean(), (pdf * w * d).mean()  # uniform, Beta, Beta importance-weighted

    (u1, beta1, iw1), (u2, beta2, iw2) = expectations(s1), expectations(s2)
    assert u1 == pytest.approx(u2, rel=1e-4)
    assert iw1 == pytest.approx(iw2, rel=1e-4) and iw1 == pytest.approx(u1, rel=1e-4)
    assert abs(beta1 - beta2) > 0.02 * beta1  # 4% here, 1e-4 above


def test_continuous_reward_is_per_grid_cell_as_the_chains_is_per_step():
    """The learned sampler's "bound" reward: on the chain one step's KL, in continuous time the ELBO integrand times
    1 / grid. For an eps error d everywhere, a fixed-small chain's KL at step t is 1/2 (e^(lambda_(t-1) - lambda_t)
    - 1) d^2 and the scaled integrand 1/2 (lambda drop over one grid cell) d^2: at matched SNR and matched log-SNR
    steps the two are equal to first order (1000x apart without the scale)."""
    from diffusion import DDPM, make_process, make_schedule
    from samplers import make_sampler

    chain = DDPM(make_schedule("linear", 1000), target="eps", variance="fixed_small")
    c = flow_config("vp", **{"diffusion.grid": 1000})
    vp = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, vp, 16)
    assert sampler.reward_scale == pytest.approx(1e-3)
    x0 = jnp.full((1, 2, 2, 1), 0.3)
    noise = jnp.full((1, 2, 2, 1), -0.7)
    d = 0.05
    step = jnp.array([300], jnp.int32)
    lam = chain.logsnr_np()
    kl = float(chain.row_terms(lambda xt, tt: noise + d, x0, step, noise, kind="kl")[0]) * LN2
    np.testing.assert_allclose(kl, 0.5 * np.expm1(lam[299] - lam[300]) * d * d, rtol=1e-3)
    t = vp.t_of_logsnr(jnp.array([lam[300]], jnp.float32))
    reward = float(vp.row_terms(lambda xt, nt: noise + d, x0, t, noise)[0]) * sampler.reward_scale * LN2
    cell = (13.3 + 5.0) / 1000  # the VP linear schedule's log-SNR drop over one grid cell
    np.testing.assert_allclose(reward, 0.5 * cell * d * d, rtol=1e-3)
    assert 0.2 < reward / kl < 5  # the same scale (the two schedules' log-SNR steps differ by this ratio)


def test_learned_schedule_trains_with_the_model():
    """VDM's learned schedule: its parameters are in the train state (and so the optimizer, the EMA and the
    checkpoint), and the ELBO loss moves them."""
    from training.setup import build, initial_state

    c = flow_config("vp,uniform", **{"diffusion.schedule": "learned"})
    setup = build(c)
    state = initial_state(setup)
    init = jax.device_get(state.params["schedule"])
    batch = setup.example_batch(c.train.batch_size)
    for step in range(2):
        state, metrics = setup.step_for(step)(state, batch)
    after = jax.device_get(state.params["schedule"])
    assert all(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(init), jax.tree.leaves(after)))
    assert jax.tree.structure(state.ema_params) == jax.tree.structure(state.params)
    assert np.isfinite(float(metrics["loss"]))


def test_cifar10_flow_variants_validate():
    from config.validate import check_values
    from configs import cifar10_flow

    for variant in ("uniform", "logitnormal", "adaptive"):
        c = cifar10_flow.get_config(variant)
        check_values(c)
        assert (c.diffusion.name, c.sampler.name, c.sample.method) == ("flow", variant, "heun")
