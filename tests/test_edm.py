"""EDM (diffusion/edm.py) against hand-computed values: the preconditioning, the loss weight, the rho = 7 levels,
one Heun step, the final Euler step and the churn; the log-normal sampler's draws equal EDM's; the ODE likelihood on
Gaussian data against the closed form; a 3-step run of configs/edm.py with the learned sampler, its bound and
samples, and an exact resume; validation refusals in one line."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from config.fields import ConfigError, override
from conftest import TINY, full_and_resumed
from diffusion import make_process
from diffusion.edm import EDM, edm_sampler, edm_sigmas
from diffusion.gaussian import LN2

# -- the preconditioning and the loss weight ---------------------------------------------------------------------

# sigma: (c_skip, c_out, c_in, c_noise, lambda), by hand with sigma_data = 0.5
HAND = {
    0.5: (0.25 / 0.5, 0.25 / math.sqrt(0.5), 1 / math.sqrt(0.5), math.log(0.5) / 4, 0.5 / 0.0625),
    1.0: (0.2, 0.5 / math.sqrt(1.25), 1 / math.sqrt(1.25), 0.0, 5.0),
    2.0: (0.25 / 4.25, 1 / math.sqrt(4.25), 1 / math.sqrt(4.25), math.log(2.0) / 4, 4.25),
}


def test_preconditioning_coefficients_and_loss_weight_at_hand_sigmas():
    p = EDM()
    sig = jnp.array(list(HAND), jnp.float32)
    got = np.stack([np.asarray(c) for c in p.precond(sig)], axis=1)
    want = np.array([v[:4] for v in HAND.values()])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    t = jnp.array([1 / 3, 1 / 2, 2 / 3], jnp.float32)  # t = sigma / (1 + sigma)
    np.testing.assert_allclose(p.sigma(t), sig, rtol=1e-6)
    np.testing.assert_allclose(p.t_of_edm_sigma(sig), t, rtol=1e-6)
    np.testing.assert_allclose(p.logsnr(t), -2 * np.log(list(HAND)), atol=1e-6)
    lam = np.array([v[4] for v in HAND.values()])
    np.testing.assert_allclose(p.x0_mse_factor(t), lam, rtol=1e-5)  # EDM's lambda(sigma)
    # the network sees 1000 c_noise (time_scale 1: c_noise itself) and c_in x
    seen = []

    def net(x, nt):
        seen.append((np.asarray(x[:, 0, 0, 0]), np.asarray(nt)))
        return jnp.full_like(x, 0.3)

    x0 = jnp.full((3, 1, 1, 1), 0.4)
    eps = jnp.full((3, 1, 1, 1), -1.0)
    mse, extra = p.example_losses(net, x0, t, eps)
    x = 0.4 - np.array(list(HAND))  # x = x0 + sigma eps
    np.testing.assert_allclose(seen[0][0], want[:, 2] * x, rtol=1e-5)
    np.testing.assert_allclose(seen[0][1], 1000 * want[:, 3], rtol=1e-5, atol=1e-4)
    # the "mse" (F against its effective target) is EDM's loss lambda |D - x0|^2 with D = c_skip x + c_out F
    D = want[:, 0] * x + want[:, 1] * 0.3
    np.testing.assert_allclose(mse, lam * (D - 0.4) ** 2, rtol=1e-5)
    np.testing.assert_array_equal(extra, 0.0)
    np.testing.assert_allclose(p.denoise(net, x.reshape(3, 1, 1, 1), sig)[:, 0, 0, 0], D, rtol=1e-5)
    # weighting "none" is 1: the loss weight is EDM's lambda
    from config.schema import default_config
    from weightings import make_weighting

    np.testing.assert_array_equal(make_weighting(default_config().weighting, p)(t), 1.0)


def test_predict_gives_the_denoiser_and_eps_and_stays_finite_at_both_ends():
    p = EDM()
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    x0, eps = jax.random.normal(k1, (4, 2, 2, 1)), jax.random.normal(k2, (4, 2, 2, 1))
    t = jnp.array([0.01, 0.3, 0.7, 0.99])
    xt = p.q_sample(x0, t, eps)
    out = p.training_target(x0, t, eps)
    x0_hat, eps_hat = p.predict(xt, t, out)
    np.testing.assert_allclose(x0_hat, x0, atol=1e-5)
    np.testing.assert_allclose(eps_hat, eps, atol=1e-5)
    np.testing.assert_allclose(p.eps_of(xt, p.sigma(t), out), eps, atol=1e-5)
    ends = jnp.array([0.0, 1.0])  # sigma 0 and the largest finite sigma
    _, _, c1, c2 = p.path_coefs(ends)
    np.testing.assert_allclose(c1, [0.0, 2.0], atol=1e-6)  # F's target: -eps at sigma 0, x0 / sd at infinity
    np.testing.assert_allclose(c2, [-1.0, 0.0], atol=1e-6)
    assert bool(jnp.all(jnp.isfinite(p.net_time(ends))))


# -- the sampler ---------------------------------------------------------------------------------------------------


def test_rho_7_levels_against_hand_values():
    s = np.asarray(edm_sigmas(3, 0.002, 80.0, 7.0), np.float64)
    mid = ((80 ** (1 / 7) + 0.002 ** (1 / 7)) / 2) ** 7
    np.testing.assert_allclose(s, [80.0, mid, 0.002, 0.0], rtol=1e-6)
    assert mid == pytest.approx(2.5153, abs=1e-3)
    s18 = np.asarray(edm_sigmas(18, 0.002, 80.0, 7.0))
    assert s18.shape == (19,) and s18[0] == 80.0 and s18[-1] == 0.0 and s18[-2] == pytest.approx(0.002)
    assert bool(np.all(np.diff(s18) < 0))


def gaussian_denoiser(x, sigma):
    """The optimal denoiser for x0 ~ N(0, I): x / (1 + sigma^2)."""
    return x / (1.0 + sigma[:, None, None, None] ** 2)


def test_one_heun_step_and_the_final_euler_step_by_hand():
    """Levels 2 -> 1 -> 0 from x = 3: d = (3 - 3/5) / 2 = 1.2, Euler 1.8, d' = (1.8 - 0.9) / 1 = 0.9, Heun
    3 - (1.2 + 0.9) / 2 = 1.95; the last step is Euler only: 1.95 - (1.95 - 0.975) = 0.975."""
    x = jnp.full((1, 1, 1, 1), 3.0)
    sigmas = jnp.array([2.0, 1.0, 0.0])
    calls = []
    counting = lambda x, s: (calls.append(1), gaussian_denoiser(x, s))[1]
    heun = edm_sampler(counting, x, sigmas, jax.random.PRNGKey(0))
    assert float(heun.squeeze()) == pytest.approx(0.975, rel=1e-6)
    one = edm_sampler(gaussian_denoiser, x, sigmas[:2].at[1].set(1.0), jax.random.PRNGKey(0))
    assert float(one.squeeze()) == pytest.approx(1.8, rel=1e-6)  # a single step is the last one: Euler
    euler = edm_sampler(gaussian_denoiser, x, sigmas, jax.random.PRNGKey(0), method="euler")
    assert float(euler.squeeze()) == pytest.approx(1.8 - (1.8 - 0.9), rel=1e-6)
    # ancestral: mean D + (s'/s)^2 (x - D) plus noise, the last step D itself
    anc = edm_sampler(gaussian_denoiser, x, sigmas, jax.random.PRNGKey(0), method="ancestral")
    z0 = float(jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(0), 0), (1, 1, 1, 1)).squeeze())
    x1 = 0.6 + 0.25 * (3.0 - 0.6) + math.sqrt(1.0 * (1 - 0.25)) * z0
    assert float(anc.squeeze()) == pytest.approx(x1 / 2.0, rel=1e-5)


def test_churn_raises_the_noise_level_by_hand():
    """S_churn = 1 over N = 2 steps: gamma = min(1/2, sqrt2 - 1), only where S_min <= sigma (S_min = 1.5: the first
    step); x_hat = x + sqrt(s_hat^2 - s^2) S_noise z with z = normal(fold_in(key, 0))."""
    key = jax.random.PRNGKey(7)
    x = jnp.array([3.0, -1.0]).reshape(2, 1, 1, 1)
    sigmas = jnp.array([2.0, 1.0, 0.0])
    got = edm_sampler(gaussian_denoiser, x, sigmas, key, s_churn=1.0, s_min=1.5, s_noise=1.007)
    z = np.asarray(jax.random.normal(jax.random.fold_in(key, 0), x.shape), np.float64)
    g = math.sqrt(2) - 1
    s_hat = 2.0 * (1 + g)
    x_hat = np.asarray(x, np.float64) + math.sqrt(s_hat**2 - 4.0) * 1.007 * z
    d = (x_hat - x_hat / (1 + s_hat**2)) / s_hat
    x_e = x_hat + (1.0 - s_hat) * d
    d2 = x_e - x_e / 2.0
    x1 = x_hat + (1.0 - s_hat) * 0.5 * (d + d2)
    np.testing.assert_allclose(got, x1 / 2.0, rtol=1e-5)  # step 2 (sigma 1 < S_min): no churn, Euler to 0
    # churn 0 (the default) is deterministic: the key does not matter
    a = edm_sampler(gaussian_denoiser, x, sigmas, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(a, edm_sampler(gaussian_denoiser, x, sigmas, jax.random.PRNGKey(2)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_compiled_sampler_with_edms_imagenet_churn_is_finite_and_equals_the_eager_one(dtype):
    """EDM's stochastic ImageNet-64 settings (S_churn 40, S_min 0.05, S_max 50, S_noise 1.003) on configs/edm.py's
    18 levels, the process's sampler with a stand-in network, compiled at XLA's default optimisation level (the
    suite lowers it, and the fault does not show there). gamma is 0 at the first two levels (80, 67 > S_max) and
    the last (< S_min), where the noise added must be exactly 0: sqrt(s_hat^2 - s^2), compiled, was the rounding
    error of s^2 there, of either sign (NaN from the root, stray noise otherwise), while run eagerly it was 0."""
    with jax.enable_x64(dtype == "float64"):
        p = EDM(s_churn=40.0, s_min=0.05, s_max=50.0, s_noise=1.003)
        f = lambda key: p.sample(lambda x, t: 0.1 * x, key, (2, 8, 8, 3), method="heun", steps=18, clip=False)
        key = jax.random.PRNGKey(0)
        compiled = np.asarray(jax.jit(f).lower(key).compile({"xla_backend_optimization_level": 3})(key))
        with jax.disable_jit():
            eager = np.asarray(f(key))
    assert compiled.dtype == eager.dtype == dtype
    assert np.isfinite(eager).all() and np.isfinite(compiled).all()
    # float64 samples with float32 levels (edm_sigmas), hence more than float64's rounding between the two
    np.testing.assert_allclose(compiled, eager, rtol=0, atol={"float32": 1e-5, "float64": 1e-6}[dtype])


@pytest.mark.parametrize("method", ["heun", "euler", "ancestral"])
def test_sampling_with_the_network_reaches_the_gaussian_data(method):
    """EDM.sample through the preconditioning with F of the optimal denoiser for x0 ~ N(mu, s^2 I), from
    N(0, 80^2 I) over 40 levels, against the exact ODE map of the same draws, mu + (x - mu) s / sqrt(s^2 + 80^2)
    (measured: Heun's std 0.9% above it at 40 levels, 5% at EDM's 18; Euler's 7% below at 40; the ancestral chain
    with the posterior mean as x0 loses variance with few levels, 13% at 40, 4% at 200, as continuous.py's)."""
    mu, s = 0.3, 0.6
    p = EDM()
    key = jax.random.PRNGKey(0)
    x = p.sample(gaussian_net(p, mu, s), key, (4096, 2, 2, 1), method, 40, clip=False)
    start = p.prior_sample(jax.random.split(key)[1], x.shape)
    exact = mu + (start - mu) * s / math.sqrt(s**2 + 80.0**2)
    assert float(jnp.mean(x)) == pytest.approx(mu, abs=0.01)
    want = float(jnp.std(exact))
    if method == "heun":
        assert float(jnp.std(x)) == pytest.approx(want, rel=0.015)
        assert float(jnp.max(jnp.abs(x - exact))) < 0.03
    elif method == "euler":
        assert float(jnp.std(x)) == pytest.approx(want, rel=0.08)
    else:
        assert 0.8 * want < float(jnp.std(x)) < want
    assert p.sampling_steps(method, 40) == (79 if method == "heun" else 40)


# -- the time variable for the samplers ----------------------------------------------------------------------------


def make_sampler(name, process, **fields):
    from config.schema import default_config
    from samplers import make_sampler

    c = default_config(sampler=name).sampler
    for k, v in fields.items():
        c[name][k] = v
    return make_sampler(c, process, 64)


def test_lognormal_draws_are_edms_sigmas():
    """The same normal draws n give EDM's sigma = exp(P_mean + P_std n) (training/loss.py EDMLoss), tails included:
    t = sigmoid(ln sigma) is never clipped."""
    p = EDM()
    key = jax.random.PRNGKey(3)
    B = 100_000
    t, w, _ = make_sampler("lognormal", p).sample({}, key, jnp.zeros((B, 1, 1, 1)))
    edm = np.exp(-1.2 + 1.2 * np.asarray(jax.random.normal(key, (B,), jnp.float32), np.float64))
    np.testing.assert_allclose(np.asarray(p.sigma(t), np.float64), edm, rtol=2e-5)
    assert edm.min() < 0.002 and edm.max() > 20  # tails beyond EDM's sampling range are kept
    far = jnp.array([1e-4, 1e3], jnp.float32)
    np.testing.assert_allclose(p.sigma(p.t_of_logsnr(-2.0 * jnp.log(far))), far, rtol=1e-4)
    np.testing.assert_array_equal(w, 1.0)


def test_uniform_logitnormal_learned_and_histogram_samplers_run_on_edm():
    from samplers.histogram import logsnr_range

    p = EDM()
    x0 = jax.random.normal(jax.random.PRNGKey(0), (64, 8, 8, 1))
    t, _, _ = make_sampler("uniform", p).sample({}, jax.random.PRNGKey(1), x0)
    assert bool(jnp.all((t >= 0) & (t < 1)))
    # logit-normal on the VP noise level n = sigma / sqrt(1 + sigma^2): logit(n) ~ N(0.5, 0.8^2)
    xs = jnp.zeros((20000, 1, 1, 1))
    t, _, _ = make_sampler("logitnormal", p, mean=0.5, std=0.8).sample({}, jax.random.PRNGKey(2), xs)
    sig = np.asarray(p.sigma(t), np.float64)
    n = sig / np.sqrt(1 + sig**2)
    assert stats.kstest(np.log(n / (1 - n)), stats.norm(0.5, 0.8).cdf).pvalue > 1e-3
    s = make_sampler("adaptive", p, policy_channels=(4,), policy_hidden=(8,))
    state = s.init(jax.random.PRNGKey(1), x0)
    t, w, aux = s.sample(state, jax.random.PRNGKey(2), x0)
    np.testing.assert_array_equal(t, aux["u"])
    geo = make_sampler("adaptive", p, sweep_grid="geometric").grid
    np.testing.assert_allclose(jnp.diff(p.logsnr(geo)), jnp.diff(p.logsnr(geo))[0], rtol=1e-3)
    lam = logsnr_range(p, 8)  # the histogram samplers' log-SNR bins: finite, decreasing
    assert np.all(np.isfinite(lam)) and np.all(np.diff(lam) < 0)
    for name in ("infonoise", "adaptive_noise"):
        sm = make_sampler(name, p)
        st = sm.init(jax.random.PRNGKey(0), x0)
        t, w, _ = sm.sample(st, jax.random.PRNGKey(1), x0)
        assert bool(jnp.all((t >= 0) & (t <= 1) & jnp.isfinite(w)))


def test_uncertainty_weighting_sees_edm2s_c_noise():
    """EDM2's uncertainty: Fourier features of ln(sigma) / 4 (= -log SNR / 8), loss mse / exp(u) + u."""
    from config.schema import default_config
    from weightings import make_weighting

    p = EDM()
    w = make_weighting(default_config(weighting="uncertainty").weighting, p)
    t = jnp.array([0.2, 0.5, 0.8])
    c_noise = np.log(np.asarray(p.sigma(t))) / 4
    np.testing.assert_allclose(-w.logsnr(t) / 8.0, c_noise, rtol=1e-5, atol=1e-6)
    params = w.init_params(jax.random.PRNGKey(0), {})
    mse = jnp.array([1.0, 2.0, 3.0])
    u = w.logvar(params, t)
    np.testing.assert_allclose(w.loss(params, t, mse), mse * jnp.exp(-u) + u, rtol=1e-6)


# -- the likelihood ------------------------------------------------------------------------------------------------


def gaussian_net(p, mu, s):
    """F of the optimal denoiser for x0 ~ N(mu, s^2 I), D = mu + s^2 / (s^2 + sigma^2) (x - mu), written as
    (D - c_skip x) / c_out in a form finite at sigma = 0; the network sees c_in x and 1000 c_noise."""
    sd = p.sigma_data

    def net(x_in, nt):
        sig = jnp.exp(4.0 * nt / p.time_scale)[:, None, None, None]
        r2 = sig**2 + sd**2
        x = x_in * jnp.sqrt(r2)
        return sig * jnp.sqrt(r2) / sd * (mu / (s**2 + sig**2) + (s**2 - sd**2) * x / ((s**2 + sig**2) * r2))

    return net


def test_ode_likelihood_equals_the_gaussian_log_density():
    mu, s = 0.3, 0.6
    p = EDM()
    x = mu + s * jax.random.normal(jax.random.PRNGKey(0), (256, 2, 2, 1))
    exact = -stats.norm(mu, s).logpdf(np.asarray(x)).sum(axis=(1, 2, 3)) / (4 * LN2)
    net = gaussian_net(p, mu, s)
    got = p.nll_bpd(net, x, jax.random.PRNGKey(1), pixels=False, num_t=100)[0]
    err = np.asarray(got) - exact
    assert abs(err.mean()) < 3 * err.std() / math.sqrt(len(err)) + 2e-3
    from diffusion import likelihood

    field, prior_logp = p.likelihood_ode(net)
    logp = likelihood.ode_log_likelihood(field, x[:16], None, 100, exact_trace=True, prior_logp=prior_logp)
    # per image, the prior N(0, 80^2 I) differs from the marginal N(mu, (80^2 + s^2) I) at sigma_max by about
    # mu x / 80^2 per dimension (0.004 bits/dim at x ~ 80), which averages out; the solver's own error is smaller
    err = -np.asarray(logp) / (4 * LN2) - exact[:16]
    assert np.abs(err).max() < 6e-3 and abs(err.mean()) < 1e-3
    # the VE prior
    z = jnp.full((1, 2, 2, 1), 40.0)
    assert float(p.prior_logp(z)[0]) == pytest.approx(4 * stats.norm(0, 80).logpdf(40.0), rel=1e-6)


# -- the configs, a short run, its bound and samples, an exact resume ---------------------------------------------


def edm_config(arg="", **overrides):
    from configs.edm import get_config

    tiny = {k: v for k, v in TINY.items() if not k.startswith("sample.method")}
    return override(get_config(arg), {**tiny, "sample.method": "heun", "sample.steps": 3, **overrides})


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_three_steps_with_the_learned_sampler_then_its_likelihood_and_samples():
    from diffusion.generate import sampling_fn
    from evaluation.bound import bound_bpd
    from training.setup import build, initial_state

    c = edm_config()
    setup = build(c)
    state = initial_state(setup)
    batch = setup.example_batch(c.train.batch_size)
    for step in range(3):
        state, metrics = setup.step_for(step)(state, batch)
        assert bool(metrics["finite_loss"]) and bool(metrics["finite_sampler"])
    assert int(state.sampler_state.updates) == 2  # steps 0 and 2 updated the policy
    images = np.asarray(batch["image"] if isinstance(batch, dict) else batch)[:8]
    mean, per_image, _ = bound_bpd(setup, state.ema_params, images, jax.random.PRNGKey(0), num_t=4)
    assert np.all(np.isfinite(per_image)) and 0 < mean < 100
    x = sampling_fn(setup, "heun", 3, (8, 8, 8, 1))(state.ema_params, jax.random.PRNGKey(1), None)
    assert x.shape == (8, 8, 8, 1) and x.dtype == jnp.uint8


@pytest.mark.parametrize("variant", ["infonoise", "adaptive_noise", "lognormal,uncertainty"])
def test_two_steps_with_the_histogram_samplers_and_edm2s_weighting(variant):
    """InfoNoise and the adaptive noise schedule update their log-SNR histograms from EDM's loss; EDM2's learned
    uncertainty weighting trains its own parameters beside the network's."""
    from training.setup import build, initial_state

    c = edm_config(variant)
    setup = build(c)
    state = initial_state(setup)
    before = jax.device_get(state.params)
    batch = setup.example_batch(c.train.batch_size)
    for step in range(2):
        state, metrics = setup.step_for(step)(state, batch)
        assert bool(metrics["finite_loss"]) and bool(metrics["finite_sampler"])
    if "uncertainty" in variant:
        assert not np.array_equal(before["weighting"]["w"], jax.device_get(state.params["weighting"]["w"]))


@pytest.mark.slow  # over 20 s: CI's second job
def test_edm_resume_with_the_learned_sampler_is_exact(tmp_path):
    _, full, resumed = full_and_resumed(edm_config(), tmp_path)
    chex.assert_trees_all_equal(full, resumed)
    assert int(full.sampler_state.updates) == 3


@pytest.mark.parametrize("variant", ["", "lognormal", "uniform,uncertainty", "infonoise", "adaptive_noise"])
def test_edm_config_variants_validate(variant):
    from config.validate import check_values

    c = edm_config(variant)
    check_values(c)
    assert c.diffusion.name == "edm"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"diffusion.sigma_min": 100.0}, "config.diffusion.sigma_min=100.0 is not allowed: must be below sigma_max"),
        ({"diffusion.s_min": 5.0, "diffusion.s_max": 1.0}, "config.diffusion.s_min=5.0 is not allowed: must not"),
        ({"diffusion.sigma_data": 0.0}, "config.diffusion.sigma_data=0.0 is not allowed: must be a number > 0"),
        ({"diffusion.s_churn": -1.0}, "config.diffusion.s_churn=-1.0 is not allowed: must be a number >= 0"),
        ({"sample.method": "ddim"}, "config.sample.method='ddim' is not allowed with config.diffusion.name='edm'"),
        ({"sampler.name": "speed"}, "config.sampler.name='speed' is not allowed with the continuous-time process"),
    ],
)
def test_validation_refusals_are_one_line(overrides, message):
    from config.validate import check_values

    with pytest.raises(ConfigError) as e:
        check_values(edm_config(**overrides))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_edm_config_refuses_an_unknown_variant_in_one_line():
    from configs import edm

    with pytest.raises(ValueError) as e:
        edm.get_config("nonsense")
    assert "is not a variant" in str(e.value) and "\n" not in str(e.value)


def test_edm_takes_its_defaults_from_its_fields_written_once():
    """EDM() is the config's default EDM: every field at its FIELDS default; a keyword changes one; a name that is
    no field is refused."""
    from configs.edm import get_config

    p, q = EDM(), make_process(get_config().diffusion)
    for k in ("sigma_data", "sigma_min", "sigma_max", "rho", "s_churn", "s_min", "s_max", "s_noise"):
        assert getattr(p, k) == EDM.FIELDS[k].default
    assert (p.sigma_data, p.sigma_max, p.rho) == (q.sigma_data, q.sigma_max, q.rho) == (0.5, 80.0, 7.0)
    assert EDM(rho=3.0).rho == 3.0 and EDM(rho=3.0).sigma_max == 80.0
    with pytest.raises(TypeError, match="^EDM has no field sigma, tau "):
        EDM(tau=1.0, sigma=2.0)
