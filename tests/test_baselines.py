"""The baseline samplers and weightings against values computed by hand from their formulas
(docs/method.md#baselines-timestep-samplers, docs/method.md#baselines-loss-weightings), the known bugs of public
code not repeated, and importance weights that keep the loss unbiased."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.validate import ConfigError, validate
from conftest import tiny_config
from diffusion import DDPM, make_process, make_schedule
from samplers import StepContext, make_sampler
from samplers.speed import dual
from weightings import make_weighting
from weightings.min_snr import min_snr_weights

T = 1000
TS = (0, 1, 500, T - 2, T - 1)  # the ends included
# the StepContext fields a sampler that reads only t and the losses is given nothing for
NOTHING = dict(step=None, key=None, x0=None, aux=None, params_before=None, params_after=None, rows_fn=None)


def alpha_bar_by_hand(name, t, n=T):
    """alpha_bar_t = prod_{i <= t} (1 - beta_i), with beta_i from the schedule's formula, in plain Python."""

    def beta(i):
        if name == "linear":
            return 1e-4 + (0.02 - 1e-4) * i / (n - 1)
        if name == "quad":
            return (math.sqrt(1e-4) + (math.sqrt(0.02) - math.sqrt(1e-4)) * i / (n - 1)) ** 2
        f = lambda u: math.cos((u + 0.008) / 1.008 * math.pi / 2) ** 2
        return min(1 - f((i + 1) / n) / f(i / n), 0.999)

    return math.prod(1 - beta(i) for i in range(t + 1))


def Phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def config(**over):
    c = tiny_config(**over)
    validate(c)
    return c


def weights_of(c):
    process = make_process(c.diffusion)
    assert process.num_timesteps == T
    fn = make_weighting(c.weighting, process)
    return np.asarray(jax.jit(fn)(jnp.arange(T, dtype=jnp.int32)), np.float64)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "quad"])
def test_p2_weights_by_hand(schedule):
    w1 = weights_of(config(**{"diffusion.schedule": schedule, "weighting.name": "p2"}))
    w2 = weights_of(
        config(
            **{"diffusion.schedule": schedule, "weighting.name": "p2", "weighting.p2.gamma": 0.5, "weighting.p2.k": 2.0}
        )
    )
    for t in TS:
        ab = alpha_bar_by_hand(schedule, t)
        snr = ab / (1 - ab)
        assert w1[t] == pytest.approx(1 - ab, rel=1e-5)  # gamma = k = 1: 1 / (1 + SNR) = 1 - alpha_bar
        assert w2[t] == pytest.approx((2 + snr) ** -0.5, rel=1e-5)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "quad"])
@pytest.mark.parametrize("target", ["eps", "v", "x0"])
def test_min_snr_weights_by_hand_in_each_target_form(schedule, target):
    w = weights_of(config(**{"diffusion.schedule": schedule, "diffusion.target": target, "weighting.name": "min_snr"}))
    for t in TS:
        ab = alpha_bar_by_hand(schedule, t)
        snr = ab / (1 - ab)
        want = {"eps": min(snr, 5) / snr, "v": min(snr, 5) / (snr + 1), "x0": min(snr, 5)}[target]
        assert w[t] == pytest.approx(want, rel=1e-5)
    # the known bugs: diffusers' min(SNR + 1, gamma) / (SNR + 1) for v and SpeeD's 5 / (SNR + 1) for every target
    # give about 1 and 5 at the last step, where SNR is about 4e-5
    snr_end = alpha_bar_by_hand(schedule, T - 1) / (1 - alpha_bar_by_hand(schedule, T - 1))
    assert snr_end < 1e-3
    assert w[T - 1] == pytest.approx({"eps": 1.0, "v": snr_end / (snr_end + 1), "x0": snr_end}[target], rel=1e-5)


def test_min_snr_is_safe_where_snr_is_zero():
    snr = np.array([0.0, 0.5, 5.0, 50.0])
    for target, want in (("eps", [1, 1, 1, 0.1]), ("v", [1, 0.5 / 1.5, 5 / 6, 5 / 51]), ("x0", [1, 0.5, 5, 5])):
        np.testing.assert_allclose(min_snr_weights(snr, 5.0, target), want, rtol=1e-12)


def test_speed_weights_by_hand():
    w = weights_of(config(**{"weighting.name": "speed"}))  # lam 0.6, tau 700, linear
    ab = [alpha_bar_by_hand("linear", t) for t in range(T)]
    raw = [ab[0] - ab[1]] + [(ab[t - 1] - ab[t + 1]) / 2 for t in range(1, T - 1)] + [ab[T - 2] - ab[T - 1]]
    lo, hi = min(raw), max(raw)  # over all T steps, as the reference code
    for t in (0, 1, 350, 699):
        assert w[t] == pytest.approx(0.4 + 0.2 * (raw[t] - lo) / (hi - lo), rel=1e-5)
    np.testing.assert_array_equal(w[700:], 1.0)
    # with min and max over all T, the first tau weights do not reach the bottom of [0.4, 0.6]
    assert 0.405 < w[:700].min() < 0.42 and w[:700].max() == pytest.approx(0.6, rel=1e-6)
    assert (w > 0).all()


@pytest.mark.parametrize("schedule,m", [("linear", 642), ("cosine", 959), ("quad", 829)])
def test_speed_sampler_table_and_dual_timesteps(schedule, m):
    c = config(**{"diffusion.schedule": schedule, "sampler.name": "speed"})
    sampler = make_sampler(c.sampler, DDPM(make_schedule(schedule, T)), c.train.batch_size)
    assert sampler.m == m
    p = np.asarray(sampler.p64)
    assert p[0] == pytest.approx(5 / 3800) and p[699] == pytest.approx(5 / 3800) and p[700] == pytest.approx(1 / 3800)
    assert p[T - 1] == pytest.approx(1 / 3800) and p.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(np.asarray(dual(jnp.array([0, m - 1, m, 900]), m, T)), [m, 1, 0, abs(900 - m)])
    t, w, _ = jax.jit(sampler.sample)({}, jax.random.PRNGKey(0), jnp.zeros((16, 8, 8, 1)))
    t = np.asarray(t)
    np.testing.assert_array_equal(t[9:], np.abs(t[:7] - m))  # 16 // 2 + 1 = 9 primaries, 7 duals of the first 7
    np.testing.assert_array_equal(np.asarray(w), 1.0)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "quad"])
def test_lognormal_table_by_hand_and_nearest_sigma_draws(schedule):
    c = config(**{"diffusion.schedule": schedule, "sampler.name": "lognormal"})
    sampler = make_sampler(c.sampler, DDPM(make_schedule(schedule, T)), c.train.batch_size)
    sig = [math.sqrt((1 - alpha_bar_by_hand(schedule, t)) / alpha_bar_by_hand(schedule, t)) for t in range(T)]
    cdf = lambda s: Phi((math.log(s) + 1.2) / 1.2)
    p = sampler.p64
    assert p[0] == pytest.approx(cdf((sig[0] + sig[1]) / 2), rel=1e-6)
    assert p[T - 1] == pytest.approx(1 - cdf((sig[T - 2] + sig[T - 1]) / 2), rel=1e-6)
    for t in (1, 500, T - 2):
        assert p[t] == pytest.approx(cdf((sig[t] + sig[t + 1]) / 2) - cdf((sig[t - 1] + sig[t]) / 2), rel=1e-4)
    assert p.sum() == pytest.approx(1.0)
    # the drawn timesteps are the nearest-sigma steps of the drawn log-normal sigmas
    key = jax.random.PRNGKey(3)
    t, w, _ = jax.jit(sampler.sample)({}, key, jnp.zeros((4096, 1)))
    drawn = np.exp(-1.2 + 1.2 * np.asarray(jax.random.normal(key, (4096,), jnp.float32), np.float64))
    nearest = np.argmin(np.abs(np.asarray(sig)[None, :] - drawn[:, None]), axis=1)
    assert np.mean(np.asarray(t) == nearest) > 0.995  # float32 ties at cell edges aside
    np.testing.assert_array_equal(np.asarray(w), 1.0)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "quad"])
def test_logitnormal_density_on_the_noise_level_by_hand(schedule):
    c = config(**{"diffusion.schedule": schedule, "sampler.name": "logitnormal"})
    sampler = make_sampler(c.sampler, DDPM(make_schedule(schedule, T)), c.train.batch_size)

    def density(t):  # logit-normal (m = 0, s = 1) at n_t = sqrt(1 - alpha_bar_t)
        n = math.sqrt(1 - alpha_bar_by_hand(schedule, t))
        return math.exp(-(math.log(n / (1 - n)) ** 2) / 2) / (math.sqrt(2 * math.pi) * n * (1 - n))

    p = sampler.p64
    assert p.sum() == pytest.approx(1.0)
    for t in (0, 500, T - 1):
        assert p[t] / p[250] == pytest.approx(density(t) / density(250), rel=1e-5)
    # a sampling density, not random loss weights: every weight is 1 and the draws follow p
    t, w, _ = jax.jit(sampler.sample)({}, jax.random.PRNGKey(0), jnp.zeros((20000, 1)))
    np.testing.assert_array_equal(np.asarray(w), 1.0)
    hist = np.bincount(np.asarray(t) * 10 // T, minlength=10) / 20000
    np.testing.assert_allclose(hist, p.reshape(10, 100).sum(1), atol=0.015)


def test_antithetic_timesteps_are_one_offset_and_an_even_grid():
    c = config(**{"sampler.name": "antithetic"})
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", T)), c.train.batch_size)
    key = jax.random.PRNGKey(7)
    t, w, _ = jax.jit(sampler.sample)({}, key, jnp.zeros((16, 8, 8, 1)))
    u0 = float(jax.random.uniform(key, ()))
    np.testing.assert_array_equal(np.asarray(t), [math.floor(((u0 + i / 16) % 1.0) * T) for i in range(16)])
    assert sorted(np.asarray(t) * 16 // T) == list(range(16))  # one timestep in each sixteenth of [0, T)
    np.testing.assert_array_equal(np.asarray(w), 1.0)


def improved_diffusion_history(ts, losses, n, H):
    """LossSecondMomentResampler.update_with_all_losses, written from its description: per t, the last H losses."""
    hist, count = np.zeros((n, H)), np.zeros(n, int)
    for t, loss in zip(ts, losses):
        if count[t] == H:
            hist[t, :-1] = hist[t, 1:]
            hist[t, -1] = loss
        else:
            hist[t, count[t]] = loss
            count[t] += 1
    return hist, count


def test_loss_second_moment_history_probabilities_and_weights_by_hand():
    n, H = 4, 3
    c = config(**{"sampler.name": "loss_second_moment", "sampler.loss_second_moment.history": H, "mesh.data": 8})
    sampler = make_sampler(c.sampler, DDPM(make_schedule("cosine", n)), c.train.batch_size)
    from training.mesh import batch_sharding, make_mesh

    sh = batch_sharding(make_mesh(c.mesh))
    rng = np.random.default_rng(0)
    state = sampler.init(None, None)
    update = jax.jit(lambda s, t, losses: sampler.update(s, StepContext(**NOTHING, t=t, losses=losses)))
    all_t, all_l = [], []
    for i in range(4):  # batches of 16 sharded over 8 devices, many repeats of each t: order matters
        t = rng.integers(0, n, 16) if i else np.array([0, 1, 2] * 5 + [1])  # t = 3 unseen after the first batch
        loss = rng.uniform(0.1, 2.0, 16)
        if i == 0:
            p0 = np.asarray(sampler.probabilities(state))
            np.testing.assert_allclose(p0, 0.25)
        state, metrics = update(
            state, jax.device_put(jnp.asarray(t, jnp.int32), sh), jax.device_put(jnp.asarray(loss, jnp.float32), sh)
        )
        all_t += list(t)
        all_l += list(loss)
        hist, count = improved_diffusion_history(all_t, all_l, n, H)
        np.testing.assert_allclose(np.sort(np.asarray(state["history"]), 1), np.sort(hist, 1), rtol=1e-6)
        p = np.asarray(sampler.probabilities(state))
        if (count < H).any():
            np.testing.assert_allclose(p, 1 / n)  # uniform until every t has H losses
        else:
            w = np.sqrt(np.mean(hist**2, axis=1))
            np.testing.assert_allclose(p, 0.999 * w / w.sum() + 0.001 / n, rtol=1e-5)
    assert (count == H).all()
    t, weights, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(0), jnp.zeros((64, 1)))
    np.testing.assert_allclose(np.asarray(weights), 1 / (n * p[np.asarray(t)]), rtol=1e-5)


def histogram_update(sampler):
    """update(state, t, mse, loss_weight, losses) of a histogram sampler, jitted."""
    return jax.jit(
        lambda s, t, mse, w, losses: sampler.update(
            s, StepContext(**NOTHING, t=t, losses=losses, mse=mse, loss_weight=w)
        )
    )


def test_adaptive_noise_histogram_density_and_weights_by_hand():
    """Kingma & Gao's adaptive noise schedule: log-SNR bins of the chain, each bin's running mean of the weighted
    MSE, bin masses m_b n_b / T mixed with uniform, p(t) = q_b / n_b, weights 1 / (T p(t))."""
    nb, d = 4, 0.5
    c = config(
        **{"sampler.name": "adaptive_noise", "sampler.adaptive_noise.num_bins": nb, "sampler.adaptive_noise.decay": d}
    )
    process = DDPM(make_schedule("linear", T))
    sampler = make_sampler(c.sampler, process, c.train.batch_size)
    ab = np.array([alpha_bar_by_hand("linear", t) for t in range(T)])
    lam = np.log(ab / (1 - ab))
    edges = np.linspace(lam.min(), lam.max(), nb + 1)
    bins = np.clip(np.searchsorted(edges, lam, side="right") - 1, 0, nb - 1)
    np.testing.assert_array_equal(np.asarray(sampler.bins.bin_of), bins)
    n_b = np.bincount(bins, minlength=nb)
    update = histogram_update(sampler)
    state = sampler.init(None, None)
    rng = np.random.default_rng(0)
    mean, seen = np.zeros(nb), np.zeros(nb, bool)
    for i in range(4):
        t = rng.integers(0, T, 16) if i else np.array([0] * 8 + [T - 1] * 8)  # two bins only at first
        mse, w = rng.uniform(0.1, 2.0, 16), rng.uniform(0.5, 1.5, 16)
        state, _ = update(state, jnp.asarray(t, jnp.int32), jnp.asarray(mse, jnp.float32), jnp.asarray(w), -mse)
        for b in range(nb):
            here = bins[t] == b
            if here.any():
                v = (w * mse)[here].mean()
                mean[b] = d * mean[b] + (1 - d) * v if seen[b] else v
                seen[b] = True
        np.testing.assert_allclose(np.asarray(state["mean"]), mean, rtol=1e-6)
        p = np.asarray(sampler.probabilities(state), np.float64)
        if i == 0:
            np.testing.assert_allclose(p, 1 / T, rtol=1e-6)  # uniform until the seen bins hold 99% of the steps
    assert seen.all()
    r = mean * n_b / T
    q = 0.999 * r / r.sum() + 0.001 * n_b / T
    np.testing.assert_allclose(p, q[bins] / n_b[bins], rtol=1e-5)
    t, weights, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(0), jnp.zeros((64, 1)))
    np.testing.assert_allclose(np.asarray(weights), 1 / (T * p[np.asarray(t)]), rtol=1e-5)


def flow_config(arg="", **over):
    from config.fields import override
    from configs.flow import get_config

    c = override(get_config(arg), over)
    validate(c)
    return c


@pytest.mark.parametrize("domain", ["ddpm", "flow", "vp"])
def test_adaptive_noise_equal_loss_gives_uniform_t_in_every_domain(domain):
    """Kingma & Gao's density is per unit of log SNR: an equal loss in every bin must give p(t) = 1/T on the chain
    (each bin's mass m_b n_b / T, not m_b: the chain's bins hold from 1 to 20 steps) and p(t) = 1 in continuous
    time, exactly; then every importance weight is 1."""
    over = {"sampler.name": "adaptive_noise", "sampler.adaptive_noise.num_bins": 100}
    c = config(**over) if domain == "ddpm" else flow_config("vp," if domain == "vp" else "", **over)
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 16)
    if domain == "ddpm":
        sizes = np.asarray(sampler.bins.sizes)
        assert sizes[sizes > 0].max() / sizes[sizes > 0].min() >= 20  # the bins hold 1 to 20 steps
    B = 8192
    state = sampler.init(None, None)
    t, _, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(0), jnp.zeros((B, 1)))
    ones = jnp.ones((B,), jnp.float32)
    state, metrics = histogram_update(sampler)(state, t, 0.7 * ones, ones, ones)
    assert float(metrics["ready"]) == 1.0
    if domain == "ddpm":
        np.testing.assert_allclose(np.asarray(sampler.probabilities(state)), 1 / T, rtol=1e-5)
    else:
        grid = jnp.linspace(0.0, 1.0, 4001)
        np.testing.assert_allclose(np.asarray(sampler.density(state, grid)), 1.0, rtol=1e-4)
    _, w, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(1), jnp.zeros((B, 1)))
    np.testing.assert_allclose(np.asarray(w), 1.0, rtol=1e-4)


def test_adaptive_noise_density_stays_a_density_with_the_uncertainty_weighting():
    """EDM2's uncertainty objective MSE / exp(u) + u is negative where MSE < 1/e and u = -1 (ctx.losses): a density
    built from it would have negative bin masses and a CDF that falls. The sampler bins the weighted MSE instead,
    which is never negative."""
    c = config(
        **{"sampler.name": "adaptive_noise", "sampler.adaptive_noise.num_bins": 10, "weighting.name": "uncertainty"}
    )
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", T)), 16)
    B = 4096
    t = jnp.asarray(np.random.default_rng(0).integers(0, T, B), jnp.int32)
    mse = jnp.where(t < 500, 0.05, 2.0).astype(jnp.float32)
    u = -1.0
    objective = mse * math.exp(-u) + u  # negative below t = 500
    assert float(objective.min()) < 0
    state, _ = histogram_update(sampler)(sampler.init(None, None), t, mse, jnp.ones((B,)), objective)
    p = np.asarray(sampler.probabilities(state))
    assert (p > 0).all() and np.all(np.diff(np.asarray(sampler.cdf(state))) >= 0)
    np.testing.assert_allclose(p[600] / p[100], 2.0 / 0.05, rtol=0.1)  # the 0.1% uniform share aside


def gaussian_x0_mse(sigma, v):
    """The optimal denoiser's x0-MSE for Gaussian data of variance v per dimension at x = x0 + sigma eps."""
    return v * sigma**2 / (v + sigma**2)


@pytest.mark.parametrize("domain", ["ddpm_eps", "ddpm_v", "flow"])
def test_infonoise_density_on_gaussian_data_matches_the_closed_form(domain):
    """InfoNoise on Gaussian data of variance v: the x0-MSE is m = v sigma^2 / (v + sigma^2), and the density per
    unit of log SNR times the objective's weight on the x0-MSE relative to the bound's (w F / SNR: eps 1, v
    (SNR + 1) / SNR, a flow's velocity (1 + sigma)^2) is proportional to m g, g = sigma^3 / (sigma^3 + c^3); the
    loss weight stays 1."""
    v, nb = 0.25, 50
    over = {"sampler.name": "infonoise", "sampler.infonoise.num_bins": nb, "sampler.infonoise.decay": 0.0}
    if domain == "flow":
        c = flow_config(**over)
    else:
        c = config(**over, **{"diffusion.target": domain.split("_")[1]})
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 16)
    B = 32768
    state = sampler.init(None, None)
    t, w, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(0), jnp.zeros((B, 1)))
    lam = process.logsnr(t)
    sigma = jnp.exp(-0.5 * lam)
    F = process.x0_mse_factor(t)
    mse = F * gaussian_x0_mse(sigma, v)  # the target's MSE of the optimal network
    state, metrics = histogram_update(sampler)(state, t, mse, jnp.ones((B,)), mse)
    q = np.asarray(sampler.bin_probabilities(state), np.float64)
    sig = np.exp(-0.5 * sampler.bin_logsnr64)
    rel = {"ddpm_eps": np.ones_like(sig), "ddpm_v": 1 + sig**2, "flow": (1 + sig) ** 2}[domain]
    want = gaussian_x0_mse(sig, v) * sig**3 / (sig**3 + 0.15**3) / rel
    want = np.where(np.asarray(sampler.mu) > 0, want, 0.0)
    # a bin's running means against the closed form at its middle
    np.testing.assert_allclose(q, want / want.sum(), rtol=0.03, atol=1e-4 * q.max())
    t, w, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(1), jnp.zeros((B, 1)))
    np.testing.assert_array_equal(np.asarray(w), 1.0)
    assert float(metrics["gate_c"]) == pytest.approx(0.15)


@pytest.mark.parametrize("config_module", ["flow", "edm"])
def test_infonoise_takes_the_data_end_at_its_limit(config_module):
    """t = 0 exactly (a float draw can be 0): a flow's velocity and EDM's F have F and SNR both infinite there, so
    F / SNR is the limit c2^2 = 1 from the path's coefficients (a flow's 1 / (1 - t)^2 at t = 0) instead of inf / inf
    = NaN, which would stay in the bin's running mean and stop the run; the x0-MSE there is 0. At t = 1 (alpha = 0)
    the relative weight is infinite and the example adds 0."""
    import importlib

    mod = importlib.import_module(f"configs.{config_module}")
    c = mod.get_config("infonoise")
    validate(c)
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 4)
    t = jnp.asarray([0.0, 0.25, 0.5, 1.0], jnp.float32)
    rel = np.asarray(process.x0_mse_factor_per_snr(t))
    F, snr = np.asarray(process.x0_mse_factor(t)), np.exp(np.asarray(process.logsnr(t), np.float64))
    assert np.isinf(F[0]) and np.isinf(snr[0])
    np.testing.assert_allclose(rel[0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(rel[1:3], F[1:3] / snr[1:3], rtol=1e-5)  # the quotient where both are finite
    if config_module == "flow":
        np.testing.assert_allclose(rel[:3], 1.0 / (1.0 - np.asarray(t[:3])) ** 2, rtol=1e-6)
    mse = jnp.asarray([0.5, 0.5, 0.5, 0.5], jnp.float32)
    state, _ = histogram_update(sampler)(sampler.init(None, None), t, mse, jnp.ones((4,)), mse)
    for k in ("x0_mse", "rel_weight"):
        assert np.all(np.isfinite(np.asarray(state[k]))), (k, state[k])
    b = int(sampler.bin_index(t[:1])[0])
    assert float(state["x0_mse"][b]) == 0.0 and float(state["rel_weight"][b]) == pytest.approx(1.0)
    assert np.all(np.isfinite(np.asarray(sampler.bin_probabilities(state))))


def test_infonoise_automatic_gate_onset_by_hand():
    """gate='auto': c is the largest bin sigma whose rate per unit of sigma, x0-MSE / sigma^3, reaches gate_p of
    the largest; on Gaussian data v sigma^2 / (v + sigma^2) / sigma^3 = v / (sigma (v + sigma^2))."""
    v = 1.0
    over = {"sampler.name": "infonoise", "sampler.infonoise.gate": "auto", "sampler.infonoise.num_bins": 40}
    c = config(**over)
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 16)
    B = 32768
    state = sampler.init(None, None)
    t, _, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(0), jnp.zeros((B, 1)))
    sigma = jnp.exp(-0.5 * process.logsnr(t))
    mse = process.x0_mse_factor(t) * gaussian_x0_mse(sigma, v)
    state, metrics = histogram_update(sampler)(state, t, mse, jnp.ones((B,)), mse)
    m = np.asarray(sampler.filled(state)["x0_mse"], np.float64)
    sig = np.exp(-0.5 * sampler.bin_logsnr64)
    s = m / sig**3
    c_hand = sig[s >= 0.002 * s.max()].max()
    assert float(metrics["gate_c"]) == pytest.approx(c_hand, rel=1e-5)
    closed = v / (sig * (v + sig**2))
    assert c_hand == sig[closed >= 0.002 * closed.max()].max()  # the bins' means give the closed form's onset


def test_infonoise_automatic_gate_onset_ignores_the_chains_empty_bins():
    """On the linear T = 1,000 chain 6 of the 100 log-SNR bins hold no timestep (at the low-noise end, where
    consecutive steps are far apart in log SNR). Their x0-MSE is the nearest seen bin's while their sigma is smaller,
    so their rate m / sigma^3 is the largest: counted in the maximum they lower the onset. Hand-computed profile:
    Gaussian data of variance 0.25 at each bin's middle, m = v sigma^2 / (v + sigma^2); only bins with timesteps
    count, for the maximum as for the onset. In continuous time every bin holds time, and the onset is the
    all-bins rule bit for bit."""
    v, p = 0.25, 0.002

    def onset(c):
        sampler = make_sampler(c.sampler, make_process(c.diffusion), 16)
        nb = c.sampler.infonoise.num_bins
        mu, sig = np.asarray(sampler.mu64), np.exp(-0.5 * sampler.bin_logsnr64)
        full = mu > 0
        m = np.where(full, gaussian_x0_mse(sig, v), 0.0)
        state = dict(x0_mse=jnp.asarray(m, jnp.float32), rel_weight=jnp.ones((nb,)), seen=jnp.asarray(full))
        filled = sampler.filled(state)["x0_mse"]
        return float(sampler.onset(filled)), np.asarray(filled, np.float64) / sig**3, sig, full

    got, s, sig, full = onset(config(**{"sampler.name": "infonoise", "sampler.infonoise.gate": "auto"}))
    assert np.flatnonzero(~full).tolist() == [90, 92, 94, 96, 97, 98]
    by_hand = sig[full & (s >= p * s[full].max())].max()
    all_bins = sig[full & (s >= p * s.max())].max()  # the rule before: the empty bins' rates in the maximum
    assert (round(by_hand, 3), round(all_bins, 3)) == (0.985, 0.895)
    assert got == pytest.approx(by_hand, rel=1e-6)

    got, s, sig, full = onset(flow_config(**{"sampler.name": "infonoise", "sampler.infonoise.gate": "auto"}))
    assert full.all()
    np.testing.assert_array_equal(got, np.float32(sig[s >= p * s.max()].max()))


@pytest.mark.parametrize(
    "rule, want", [("fixed", 3.0), ("sd3", 0.5), ("flux", math.exp(0.5 + 0.65 * (256 - 256) / 3840))]
)
def test_logitnormal_shift_is_sd3s_time_shift(rule, want):
    """SD3's shift t' = a t / (1 + (a - 1) t) of logit-normal draws is the logit-normal with mean + ln a: the same
    key gives exactly the shifted times. a: the field, SD3's sqrt(H W) / base, Flux's exp(mu(H W / 4))."""
    H = {"fixed": 8, "sd3": 128, "flux": 32}[rule]
    over = {"sampler.name": "logitnormal", "sampler.logitnormal.shift_rule": rule, "sampler.logitnormal.shift": 3.0}
    plain = make_sampler(
        flow_config(**{"sampler.name": "logitnormal"}).sampler, make_process(flow_config().diffusion), 16
    )
    c = flow_config(**over)
    shifted = make_sampler(c.sampler, make_process(c.diffusion), 16)
    x = jnp.zeros((4096, H, H, 1))
    assert shifted.shift_of(x) == pytest.approx(want)
    t0, _, _ = plain.sample({}, jax.random.PRNGKey(3), x)
    t1, _, _ = shifted.sample({}, jax.random.PRNGKey(3), x)
    np.testing.assert_allclose(np.asarray(t1), np.asarray(want * t0 / (1 + (want - 1) * t0)), rtol=2e-5, atol=1e-6)
    # on the chain: the table of the logit-normal with mean ln a
    d = config(**over)
    chain = make_sampler(d.sampler, make_process(d.diffusion), 16)
    n = np.sqrt(1 - np.array([alpha_bar_by_hand("linear", t) for t in range(T)]))
    pi = np.exp(-((np.log(n / (1 - n)) - math.log(want)) ** 2) / 2) / (n * (1 - n))
    np.testing.assert_allclose(chain.table(d.sampler.logitnormal, chain.process, want), pi / pi.sum(), rtol=1e-6)
    tc, _, _ = jax.jit(chain.sample)({}, jax.random.PRNGKey(4), x)
    mean_t = float(np.sum(np.arange(T) * pi / pi.sum()))
    assert abs(float(np.mean(np.asarray(tc))) - mean_t) < 4 * np.sqrt(
        np.sum((np.arange(T) - mean_t) ** 2 * pi / pi.sum()) / 4096
    )


@pytest.mark.parametrize("name", ["loss_second_moment", "grad_variance", "adaptive_noise"])
def test_importance_weighted_loss_is_an_unbiased_estimate_of_the_uniform_loss(name):
    c = config(**{"sampler.name": name, "sampler.grad_variance.importance_weights": True})
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", T)), c.train.batch_size)
    t_all = np.arange(T)
    loss = 1.0 + 3.0 * np.sin(t_all / 90.0) ** 2 + (t_all < 50) * 5.0  # a fixed, uneven per-timestep loss
    if name == "loss_second_moment":
        state = dict(
            history=jnp.asarray(np.repeat(loss[:, None], 10, 1) * np.linspace(0.5, 1.5, 10), jnp.float32),
            count=jnp.full((T,), 10, jnp.int32),
        )
    elif name == "adaptive_noise":
        state = dict(mean=jnp.asarray(np.linspace(0.1, 8.0, 100) ** 2, jnp.float32), seen=jnp.ones((100,), bool))
    else:
        state = dict(
            ema=jnp.asarray(np.linspace(5.0, 0.1, 20) ** 2, jnp.float32), updates=jnp.int32(3), last=jnp.zeros(20)
        )
    p = np.asarray(sampler.probabilities(state))
    assert p.max() / p.min() > 5  # far from uniform
    N = 200_000
    t, w, _ = jax.jit(sampler.sample)(state, jax.random.PRNGKey(11), jnp.zeros((N, 1)))
    t, w = np.asarray(t), np.asarray(w, np.float64)
    est = w * loss[t]
    se = est.std() / math.sqrt(N)
    assert abs(est.mean() - loss.mean()) < 4 * se
    assert abs(loss[t].mean() - loss.mean()) > 8 * se  # without the weights the same draws are far off


def grad_variance_on_timestep_gradients(n, **fields):
    """grad_variance (5 bins, decay 0.5, an update every step, `fields`) on a DDPM chain of n steps and a "model"
    whose per-example gradient is its timestep: (sampler, jitted update(state, key), x0)."""
    overrides = {"sampler.name": "grad_variance", "sampler.grad_variance.num_bins": 5}
    overrides.update({"sampler.grad_variance.decay": 0.5, "sampler.grad_variance.update_every": 1})
    overrides.update({f"sampler.grad_variance.{k}": v for k, v in fields.items()})
    c = config(**overrides)
    sampler = make_sampler(c.sampler, DDPM(make_schedule("cosine", n)), c.train.batch_size)
    objective = lambda p, x0, t, noise, key: (p["w"] * t.astype(jnp.float32),) * 2  # (objective, MSE)
    x0 = jnp.zeros((8, 2, 2, 1))

    @jax.jit
    def update(state, key):
        ctx = StepContext(
            step=jnp.int32(0),
            key=key,
            x0=x0,
            t=None,
            aux={},
            losses=None,
            params_before={"w": jnp.float32(1.0)},
            params_after=None,
            rows_fn=None,
            objective=objective,
        )
        return sampler.update(state, ctx)[0]

    return sampler, update, x0


def test_grad_variance_rms_is_the_variance_optimal_proposal():
    """estimate=rms: v_b = (|g1|^2 + |g2|^2) / 2 and p(bin) proportional to n_b sqrt(E_b |g|^2), by hand on a
    model whose per-example gradient is its timestep; with importance weights the weighted loss is unbiased."""
    n = 10
    sampler, update, x0 = grad_variance_on_timestep_gradients(
        n, estimate="rms", importance_weights=True, uniform_prob=0.1
    )
    state = sampler.init(None, x0)
    lasts = []
    for i in range(30):
        state = update(state, jax.random.PRNGKey(i))
        lasts.append(np.asarray(state["last"]))
        # bin b holds t in {2b, 2b + 1}: (t1^2 + t2^2) / 2 takes one of three values
        b = np.arange(5)
        allowed = [{(2 * k) ** 2, (2 * k + 1) ** 2, ((2 * k) ** 2 + (2 * k + 1) ** 2) / 2} for k in b]
        assert all(v in a for v, a in zip(lasts[-1], allowed))
    ema = 0.0
    for v in lasts:
        ema = 0.5 * ema + 0.5 * v
    ema = ema / (1 - 0.5**30)
    np.testing.assert_allclose(np.asarray(state["ema"]), ema, rtol=1e-5)
    s = 2 * np.sqrt(ema)  # n_b = 2 timesteps per bin
    want_bin = 0.9 * s / s.sum() + 0.1 / 5
    p = np.asarray(sampler.probabilities(state))
    np.testing.assert_allclose(p, np.repeat(want_bin / 2, 2), rtol=1e-5)
    # with the exact second moments E_b t^2 the proposal is proportional to sqrt(E_b t^2) per bin: M below uniform's
    g2 = np.arange(n, dtype=np.float64) ** 2
    exact = np.repeat(np.sqrt((g2[0::2] + g2[1::2]) / 2), 2)
    p_star = exact / exact.sum()
    m = lambda q: np.sum(g2 / (n * n * q))  # E_{t~q} |g u / q|^2 with u = 1 / n
    assert m(p_star) < m(np.full(n, 1 / n)) and m(p_star) <= m(p) + 1e-9
    # the draws' importance weights make the weighted loss unbiased for the uniform mean
    t, w, _ = sampler.sample(state, jax.random.PRNGKey(99), jnp.zeros((20000, 2, 2, 1)))
    est = np.asarray(w) * np.asarray(t, np.float64)
    assert abs(est.mean() - (n - 1) / 2) < 4 * est.std() / np.sqrt(len(est))


def test_grad_variance_estimate_and_table():
    n = 10
    sampler, update, x0 = grad_variance_on_timestep_gradients(n)
    state = sampler.init(None, x0)
    np.testing.assert_allclose(np.asarray(sampler.probabilities(state)), 0.1)  # uniform before the first estimate
    lasts = []
    for i in range(40):
        state = update(state, jax.random.PRNGKey(i))
        lasts.append(np.asarray(state["last"]))
        assert set(np.unique(lasts[-1])) <= {0.0, 0.5}
    mean = np.mean(lasts, axis=0)
    assert ((mean > 0.1) & (mean < 0.4)).all()  # E (t1 - t2)^2 / 2 = 1/4 within a bin of two steps
    # the bias-corrected moving average with decay 0.5, by hand
    ema = 0.0
    for v in lasts:
        ema = 0.5 * ema + 0.5 * v
    np.testing.assert_allclose(np.asarray(state["ema"]), ema / (1 - 0.5**40), rtol=1e-5)
    est = np.asarray(state["ema"])
    want_bin = 0.999 * est / est.sum() + 0.001 / 5
    np.testing.assert_allclose(np.asarray(sampler.probabilities(state)), np.repeat(want_bin / 2, 2), rtol=1e-5)


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("sampler.speed.k", 0.0, "config.sampler.speed.k=0.0 is not allowed: must be a number > 0"),
        (
            "sampler.speed.tau",
            0,
            "config.sampler.speed.tau=0 is not allowed: must be an integer in 1..1000 (config.diffusion.num_timesteps)",
        ),
        (
            "sampler.speed.tau",
            1001,
            "config.sampler.speed.tau=1001 is not allowed: must be an integer in 1..1000 "
            "(config.diffusion.num_timesteps)",
        ),
        ("weighting.speed.lam", 5.0, "config.weighting.speed.lam=5.0 is not allowed: must be a number in [0.0, 1.0]"),
        (
            "weighting.speed.tau",
            2000,
            "config.weighting.speed.tau=2000 is not allowed: must be an integer in 1..1000 "
            "(config.diffusion.num_timesteps)",
        ),
        ("weighting.p2.gamma", 0.0, "config.weighting.p2.gamma=0.0 is not allowed: must be a number > 0"),
        ("weighting.p2.k", -1.0, "config.weighting.p2.k=-1.0 is not allowed: must be a number > 0"),
        ("weighting.min_snr.gamma", -5.0, "config.weighting.min_snr.gamma=-5.0 is not allowed: must be a number > 0"),
        ("sampler.lognormal.std", 0.0, "config.sampler.lognormal.std=0.0 is not allowed: must be a number > 0"),
        (
            "sampler.loss_second_moment.uniform_prob",
            0.0,
            "config.sampler.loss_second_moment.uniform_prob=0.0 is not allowed: must be a number in (0.0, 1.0]",
        ),
        (
            "sampler.grad_variance.num_bins",
            0,
            "config.sampler.grad_variance.num_bins=0 is not allowed: must be an integer "
            "in 1..1000 (config.diffusion.num_timesteps)",
        ),
    ],
)
def test_out_of_range_parameters_are_refused_naming_the_field(field, value, needle):
    section, name = field.split(".")[:2]
    c = tiny_config(**{f"{section}.name": name, field: value})
    with pytest.raises(ConfigError, match=re.escape(needle)):
        validate(c)


def test_unknown_weighting_lists_the_registered_ones():
    with pytest.raises(
        ConfigError,
        match="config.weighting.name='p3' is not allowed: must be one of likelihood, min_snr, none, p2, speed, "
        "uncertainty",
    ):
        validate(tiny_config(**{"weighting.name": "p3"}))


def test_cifar10_variants_are_one_config_with_the_named_method():
    from configs import cifar10

    for schedule in ("linear", "cosine", "quad"):
        for method, (sampler, weighting) in cifar10.METHODS.items():
            c = cifar10.get_config(f"{schedule},{method}")
            validate(c)
            assert (c.diffusion.schedule, c.sampler.name, c.weighting.name) == (schedule, sampler, weighting)
            assert c.model.ch == 128 and c.train.lr == 2e-4
    base = cifar10.get_config()
    assert (base.diffusion.schedule, base.sampler.name) == ("quad", "adaptive")
    with pytest.raises(ValueError, match="METHOD one of uniform, p2"):
        cifar10.get_config("linear,p3")


# -- EDM2's learned uncertainty weighting (weightings/uncertainty.py) -----------------------------------------------


def test_uncertainty_weighting_by_hand():
    """u = <w / |w|, sqrt(2) cos(2 pi (nu c + phi))> with c = -log SNR / 8 (EDM2's ln(sigma) / 4), the features from
    default_rng(seed); loss = mse exp(-u) + u; w(t) itself is 1. Discrete (log SNR from the chain) and continuous
    (a flow at t = 0.25: SNR = 9)."""
    from diffusion.flow import Flow

    c = config(**{"weighting.name": "uncertainty", "weighting.uncertainty.channels": 16})
    applied = make_weighting(c.weighting, make_process(c.diffusion))
    params = applied.init_params(jax.random.PRNGKey(3), {"params": {}})
    assert set(params) == {"params", "weighting"} and params["weighting"]["w"].shape == (16,)
    w = np.asarray(params["weighting"]["w"], np.float64)
    rng = np.random.default_rng(0)
    nu, phi = rng.standard_normal(16), rng.random(16)

    def u_by_hand(logsnr):
        return math.sqrt(2) * np.cos(2 * math.pi * (-logsnr / 8 * nu + phi)) @ (w / np.linalg.norm(w))

    mse = np.array([0.9, 0.3, 0.05, 0.02, 1.5])
    u = np.array(
        [u_by_hand(math.log(alpha_bar_by_hand("linear", t) / (1 - alpha_bar_by_hand("linear", t)))) for t in TS]
    )
    got = np.asarray(applied.loss(params, jnp.array(TS), jnp.asarray(mse, jnp.float32)))
    np.testing.assert_allclose(got, mse * np.exp(-u) + u, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(applied(jnp.array(TS))), 1.0)

    flow = make_weighting(c.weighting, Flow())
    got = float(flow.loss(params, jnp.array([0.25]), jnp.array([0.4]))[0])
    u = u_by_hand(math.log(9.0))
    assert got == pytest.approx(0.4 * math.exp(-u) + u, rel=1e-5, abs=1e-5)


def test_uncertainty_learns_the_log_of_each_levels_loss():
    """Minimising mse exp(-u) + u over the weighting's parameters alone gives exp(u(t)) = mse(t) (the minimiser of
    m e^-u + u): EDM2's normalisation by each noise level's expected loss."""
    import optax

    c = config(**{"weighting.name": "uncertainty", "diffusion.num_timesteps": 100, "sampler.name": "uniform"})
    process = make_process(c.diffusion)
    applied = make_weighting(c.weighting, process)
    params = applied.init_params(jax.random.PRNGKey(0), {})
    t = jnp.arange(100)
    m = jnp.asarray(0.5 * (1 - process.schedule.np64["alphas_cumprod"]) + 0.01, jnp.float32)
    tx = optax.adam(0.05)

    @jax.jit
    def step(params, opt):
        g = jax.grad(lambda q: jnp.mean(applied.loss(q, t, m)))(params)
        u, opt = tx.update(g, opt)
        return optax.apply_updates(params, u), opt

    opt = tx.init(params)
    before = np.asarray(jnp.exp(applied.logvar(params, t)) / m)
    for _ in range(2000):
        params, opt = step(params, opt)
    ratio = np.asarray(jnp.exp(applied.logvar(params, t)) / m)
    assert np.abs(np.log(before)).max() > 1.0  # it had to move
    np.testing.assert_allclose(ratio, 1.0, atol=0.02)


def test_uncertainty_weighting_trains_in_the_step_and_resumes_exactly(tmp_path):
    """Its parameters are a collection of the train state (optimizer, EMA, checkpoint): the step moves them,
    and a real orbax checkpoint resumes exactly."""
    import chex

    from conftest import full_and_resumed
    from training.setup import initial_state

    c = config(**{"weighting.name": "uncertainty", "sampler.name": "uniform"})
    setup, full, resumed = full_and_resumed(c, tmp_path)
    chex.assert_trees_all_equal(full, resumed)
    assert "weighting" in full.params and "weighting" in full.ema_params
    init = jax.device_get(initial_state(setup).params["weighting"]["w"])
    assert np.abs(full.params["weighting"]["w"] - init).max() > 1e-4


def test_beta_cell_masses_and_weights_by_hand():
    """Beta(2, 1) of t / T has CDF u^2, so step t's cell [t/T, (t+1)/T) holds (2t + 1) / T^2; a uniform floor m mixes
    in m / T; with importance weights each weight is 1 / (T p(t)), without them 1; Beta(1, 1) is uniform (to float64
    rounding)."""
    over = {"sampler.name": "beta", "sampler.beta.a": 2.0, "sampler.beta.b": 1.0, "sampler.beta.uniform_mix": 0.2}
    c = config(**over, **{"sampler.beta.importance_weights": True})
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", T)), c.train.batch_size)
    t_all = np.arange(T)
    want = 0.8 * (2 * t_all + 1) / T**2 + 0.2 / T
    np.testing.assert_allclose(sampler.p64, want, rtol=1e-12)
    N = 50_000
    t, w, _ = jax.jit(sampler.sample)({}, jax.random.PRNGKey(5), jnp.zeros((N, 1)))
    t, w = np.asarray(t), np.asarray(w, np.float64)
    np.testing.assert_allclose(w, 1 / (T * want[t]), rtol=1e-5)
    hist = np.bincount(t * 4 // T, minlength=4) / N
    quarters = [0.8 * ((q + 1) ** 2 - q**2) / 16 + 0.05 for q in range(4)]
    np.testing.assert_allclose(hist, quarters, atol=4 * math.sqrt(0.25 / N))
    plain = make_sampler(config(**over).sampler, DDPM(make_schedule("linear", T)), 16)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(plain.sample)({}, jax.random.PRNGKey(5), jnp.zeros((64, 1)))[1]), 1
    )
    flat = config(**{"sampler.name": "beta"})
    np.testing.assert_allclose(make_sampler(flat.sampler, DDPM(make_schedule("linear", T)), 16).p64, 1 / T, rtol=1e-12)


def test_beta_in_continuous_time_draws_exactly_and_weights_by_its_density():
    """Flow matching: t ~ Beta(0.5, 2), density 0.75 t^-1/2 (1 - t) (B(1/2, 2) = 4/3); the weighted mean of t^2 is
    the uniform one, 1/3, and the unweighted mean of t is 0.5 / 2.5; the mirror image Beta(2, 0.5) never gives t = 1."""
    c = flow_config(**{"sampler.name": "beta", "sampler.beta.a": 0.5, "sampler.beta.b": 2.0})
    c.sampler.beta.importance_weights = True
    process = make_process(c.diffusion)
    sampler = make_sampler(c.sampler, process, 16)
    N = 200_000
    t, w, _ = jax.jit(sampler.sample)({}, jax.random.PRNGKey(2), jnp.zeros((N, 1)))
    t, w = np.asarray(t, np.float64), np.asarray(w, np.float64)
    inside = t > 1e-3  # where float32 keeps the weight's relative error small
    np.testing.assert_allclose(w[inside], 1 / (0.75 * t[inside] ** -0.5 * (1 - t[inside])), rtol=1e-4)
    assert abs(t.mean() - 0.2) < 4 * t.std() / math.sqrt(N)
    est = w * t**2
    assert abs(est.mean() - 1 / 3) < 4 * est.std() / math.sqrt(N)
    mirror = flow_config(**{"sampler.name": "beta", "sampler.beta.a": 2.0, "sampler.beta.b": 0.5})
    t, _, _ = jax.jit(make_sampler(mirror.sampler, process, 16).sample)({}, jax.random.PRNGKey(2), jnp.zeros((N, 1)))
    assert float(jnp.max(t)) < 1.0 and float(jnp.mean(t > 0.999)) > 0.01


@pytest.mark.parametrize("field,value", [("a", 0.0), ("b", -1.0), ("uniform_mix", 1.0)])
def test_beta_refuses_parameters_out_of_range(field, value):
    with pytest.raises(ConfigError, match=rf"sampler\.beta\.{field}"):
        config(**{"sampler.name": "beta", f"sampler.beta.{field}": value})


@pytest.mark.parametrize("variance", ["fixed_large", "fixed_small"])
def test_likelihood_weighting_is_the_bounds_own_weight_of_the_eps_mse(variance):
    """The Gaussian KL of the bound at t (diffusion/ddpm.py kl_terms_bpd) minus its value for a perfect prediction is
    w_eps(t) mean (eps - eps_hat)^2 / ln 2 at every t, t = 0 included; the table is w_eps normalised to mean 1, and on
    the x0 target it weighs the x0-MSE by w_eps SNR (the same objective), normalised alike."""
    from weightings.likelihood import bound_weights_eps

    process = DDPM(make_schedule("linear", T), variance=variance)
    w = bound_weights_eps(process)
    rng = np.random.default_rng(0)
    x0 = jnp.asarray(rng.uniform(-1, 1, (5, 4, 4, 1)), jnp.float32)
    noise = jnp.asarray(rng.normal(size=(5, 4, 4, 1)), jnp.float32)
    out = noise + 0.3 * jnp.asarray(rng.normal(size=(5, 4, 4, 1)), jnp.float32)
    t = jnp.asarray(TS, jnp.int32)
    xt = process.q_sample(x0, t, noise)
    kl = np.asarray(process.kl_terms_bpd(x0, xt, t, out), np.float64)
    kl_perfect = np.asarray(process.kl_terms_bpd(x0, xt, t, noise), np.float64)
    mse = np.asarray(jnp.mean((out - noise) ** 2, axis=(1, 2, 3)), np.float64)
    np.testing.assert_allclose(kl - kl_perfect, w[list(TS)] * mse / math.log(2), rtol=2e-3)
    # by hand at t = 500: beta^2 / (2 beta (1 - beta) (1 - alpha_bar)) with fixed_large's sigma^2 = beta
    if variance == "fixed_large":
        beta = 1e-4 + (0.02 - 1e-4) * 500 / (T - 1)
        assert w[500] == pytest.approx(beta / (2 * (1 - beta) * (1 - alpha_bar_by_hand("linear", 500))), rel=1e-9)
    c = config(**{"weighting.name": "likelihood", "diffusion.variance": variance})
    table = weights_of(c)
    np.testing.assert_allclose(table, w / w.mean(), rtol=1e-6)
    x0_table = weights_of(
        config(**{"weighting.name": "likelihood", "diffusion.variance": variance, "diffusion.target": "x0"})
    )
    x0_weight = w * process.snr_np()
    np.testing.assert_allclose(x0_table, x0_weight / x0_weight.mean(), rtol=1e-5)


def test_beta_search_moves_theta_by_the_abba_rounds_by_hand():
    """Window ends every step (window=1); a rows function whose every row is the parameters' value v makes the probe's
    bound B = v T (the strata's cells sum to T). After step 0 (the first window's end: probe captured, no reduction)
    four windows with reductions r = (3, 1, 1, 2) end an even round: ABBA gives r_+ = 3 + 2, r_- = 1 + 1, g = 3/7,
    theta += step g delta; the next round's order is BAAB, so (1, 3, 3, 1) gives r_+ = 6, r_- = 2, g = 1/2 again in
    the direction of the + windows. Between, the windows' parameters are theta + sigma s_j delta."""
    c = config(
        **{"sampler.name": "beta_search", "sampler.beta_search.window": 1, "sampler.beta_search.probe_images": 4}
    )
    sampler = make_sampler(c.sampler, DDPM(make_schedule("linear", T)), 16)
    x0 = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (16, 4, 4, 1)), jnp.float32)
    rows_fn = lambda params, x, t, noise, **kw: jnp.full((x.shape[0],), params, jnp.float32)
    state = sampler.init(jax.random.PRNGKey(0), x0)

    def end_window(state, bound, step):
        t, w, aux = sampler.sample(state, jax.random.PRNGKey(step), x0)
        np.testing.assert_array_equal(np.asarray(w), 1.0)
        fields = dict(NOTHING, step=jnp.int32(step), key=jax.random.PRNGKey(50 + step), x0=x0, aux=aux)
        fields.update(params_after=jnp.float32(bound / T), rows_fn=rows_fn)
        ctx = StepContext(**fields, t=t, losses=jnp.zeros(16), is_periodic=True)
        return sampler.update(state, ctx)

    bounds = [10.0, 7.0, 6.0, 5.0, 3.0, 2.0, -1.0, -4.0, -5.0]  # reductions 3, 1, 1, 2, then 1, 3, 3, 1
    sigma, step = c.sampler.beta_search.sigma, c.sampler.beta_search.step
    theta, delta = np.zeros(2), None
    for k, bound in enumerate(bounds):
        if k >= 1:  # the window that ends at step k trained under theta + sigma s delta
            a, b = (float(v) for v in sampler.params_now(state))
            s = [1, -1, -1, 1, -1, 1, 1, -1][k - 1]
            np.testing.assert_allclose([a, b], np.exp(theta + sigma * s * delta), rtol=1e-6)
        state, metrics = end_window(state, bound, k)
        assert float(metrics["probe_bound"]) == pytest.approx(bound, rel=1e-6)
        if k in (4, 8):
            g = 3 / 7 if k == 4 else 0.5
            assert float(metrics["grad"]) == pytest.approx(g, rel=1e-6)
            theta = theta + step * g * delta
            a_b = np.log([float(metrics["a"]), float(metrics["b"])])
            np.testing.assert_allclose(a_b, theta, rtol=1e-5, atol=1e-6)
        delta = np.asarray(state["delta"], np.float64)
    np.testing.assert_array_equal(np.abs(delta), 1.0)
    assert int(state["windows"]) == len(bounds)


def test_fixed_and_searched_betas_need_a_fixed_schedule_unless_weighted():
    """VDM's learned schedule descends the bound only under uniform or importance-weighted t: `beta` without its
    weights and `beta_search` (a weighting learner) are refused in one line; `beta` with its weights is allowed."""
    over = {"diffusion.schedule": "learned", "sampler.name": "beta"}
    with pytest.raises(ConfigError, match=r"config\.sampler\.beta\.importance_weights=False is not allowed"):
        flow_config("vp,", **over)
    flow_config("vp,", **over, **{"sampler.beta.importance_weights": True})
    with pytest.raises(ConfigError, match=r"config\.sampler\.name='beta_search' is not allowed"):
        flow_config("vp,", **{**over, "sampler.name": "beta_search"})
