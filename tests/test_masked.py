"""The masked (absorbing-state) diffusion process (diffusion/masked.py): its schedules, masks, loss and bound against
google-deepmind/md4's own code (tests/fixtures/md4_vectors.npz, made by tests/fixtures/make_md4_vectors.py from md4
at b9fbf29, in float64), against closed forms that fail when the bound's weight or the masking is wrong, and its
ancestral sampler."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.registry import CONTINUOUS, FIXED_SCHEDULE, INVERTIBLE, LIKELIHOOD, SAMPLING
from diffusion.masked import SCHEDULES, Masked

HERE = os.path.dirname(os.path.abspath(__file__))
MD4 = np.load(os.path.join(HERE, "fixtures", "md4_vectors.npz"))
# md4's schedule names -> ours (its "cosine" is 1 - sin(pi t / 2), ours "cosine_md4")
MD4_NAMES = {
    "linear": dict(schedule="linear"),
    "cosine": dict(schedule="cosine_md4"),
    "poly2": dict(schedule="polynomial", power=2.0),
    "poly3": dict(schedule="polynomial", power=3.0),
}


def md4_like(name):
    """Our process set as md4's: its squeezed schedule with eps = 1e-4, s = t, the network fed t itself."""
    return Masked(
        vocab_size=int(MD4["vocab_size"]), ends="squeeze", eps=float(MD4["eps"]), time_scale=1.0, **MD4_NAMES[name]
    )


def fixture_network(xt, t):
    """The network of the fixture script: W + t W2 at [MASK] positions, W elsewhere: [B, L, V]."""
    W, W2 = jnp.asarray(MD4["W"]), jnp.asarray(MD4["W2"])
    masked = (xt == int(MD4["vocab_size"]))[..., None]
    return W[None] + jnp.where(masked, t[:, None, None] * W2[None], 0.0)


def test_offers_tokens_and_a_noise_level_not_a_gaussian_path():
    assert Masked.offers(None) == {CONTINUOUS, INVERTIBLE, FIXED_SCHEDULE, SAMPLING, LIKELIHOOD}
    assert not hasattr(Masked, "path_coefs") and not hasattr(Masked, "x0_mse_factor")


@pytest.mark.parametrize("name", list(MD4_NAMES))
def test_schedules_match_md4(name):
    p, t = md4_like(name), MD4[f"{name}/t_grid"]
    a, da = p.alpha(t, np)
    np.testing.assert_allclose(a, MD4[f"{name}/alpha"], rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(da, MD4[f"{name}/dalpha"], rtol=1e-13, atol=1e-16)
    # md4's dgamma_times_alpha is alpha' / (1 - alpha) = -w
    np.testing.assert_allclose(-p.weight(t, np), MD4[f"{name}/dgamma_times_alpha"], rtol=1e-12)


@pytest.mark.parametrize("name", list(MD4_NAMES))
def test_masks_loss_and_bound_match_md4(name):
    """md4's masks from the recorded uniforms, its per-sequence loss (nats) and its bits-per-token total, float64."""
    p = md4_like(name)
    L = int(MD4["seq_len"])
    with jax.enable_x64(True):
        x, t, u = (jnp.asarray(MD4[f"{name}/{k}"]) for k in ("x", "t", "u"))
        xt = p.q_sample(x, t, u)
        np.testing.assert_array_equal(xt, MD4[f"{name}/zt"])
        rows = np.asarray(p.row_terms(fixture_network, x, t, u))
    np.testing.assert_allclose(rows * L * math.log(2.0), MD4[f"{name}/loss_diff"], rtol=1e-12)
    np.testing.assert_allclose(rows.mean(), MD4[f"{name}/loss_diff_bpt"], rtol=1e-12)
    np.testing.assert_allclose(p.reconstruction_bpt(), MD4[f"{name}/loss_recon"], rtol=1e-12)
    np.testing.assert_allclose(rows.mean() + p.reconstruction_bpt(), MD4[f"{name}/loss"], rtol=1e-12)
    assert float(MD4[f"{name}/loss_prior"]) == 0.0


def test_one_row_by_hand():
    """x0 = (3, 1, 4), u = (0.9, 0.2, 0.6) at t = 0.5 with the linear schedule truncated at eps = 0.1: s = 0.55,
    alpha = 0.45, so tokens 0 and 2 (u >= alpha) are masked; w(s) = 1 / s; the logits are 0 except 2 at token 3 and
    1 at token 4 (V = 5). Integrand = (1 - eps) w(s) (CE_0 + CE_2) / (3 ln 2)."""
    p = Masked(vocab_size=5, schedule="linear", eps=0.1)
    x0, u, t = jnp.array([[3, 1, 4]]), jnp.array([[0.9, 0.2, 0.6]]), jnp.array([0.5])
    np.testing.assert_array_equal(p.q_sample(x0, t, u), [[5, 1, 5]])
    logits = jnp.zeros((1, 3, 5)).at[:, :, 3].set(2.0).at[:, :, 4].set(1.0)
    z = math.exp(2) + math.exp(1) + 3
    ce = (math.log(z) - 2.0) + (math.log(z) - 1.0)
    want = 0.9 * (1 / 0.55) * ce / (3 * math.log(2))
    got = float(p.row_terms(lambda xt, tt: logits, x0, t, u)[0])
    assert got == pytest.approx(want, rel=1e-6)
    assert p.reconstruction_bpt() == pytest.approx(0.1 * math.log2(5), rel=1e-12)  # 1 - alpha(eps) = eps


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_uniform_network_integrand_is_minus_alpha_prime_log_v(schedule):
    """With uniform logits every masked token costs log V, and the expected integrand at t is
    (ds/dt) w(s) (1 - alpha(s)) log2 V = -(ds/dt) alpha'(s) log2 V: a swapped mask (alpha masked instead of 1 -
    alpha), a weight without alpha' or without 1 / (1 - alpha), or a missing ds/dt, each miss it. Its integral over t
    plus the reconstruction term is log2 V exactly (the bound of a uniform model, whatever the schedule)."""
    V, L = 7, 4096
    p = Masked(vocab_size=V, schedule=schedule, power=3.0, eps=0.2)
    t = jnp.array([0.05, 0.3, 0.6, 0.9])
    x0 = jax.random.randint(jax.random.PRNGKey(0), (4, L), 0, V)
    u = p.draw_noise(jax.random.PRNGKey(1), x0)
    got = np.asarray(p.row_terms(lambda xt, tt: jnp.zeros(xt.shape + (V,)), x0, t, u))
    s = 0.2 + 0.8 * np.asarray(t, np.float64)
    a, da = p.alpha(s, np)
    want = -0.8 * da * math.log2(V)
    # the masked fraction is binomial: its standard error sqrt(a (1 - a) / L) carried through the weight
    se = 0.8 * (-da / (1 - a)) * np.sqrt(a * (1 - a) / L) * math.log2(V)
    assert np.all(np.abs(got - want) < 5 * se + 1e-5), (got, want, se)
    # the integral of -(ds/dt) alpha'(s) over t in [0, 1] is alpha(eps) - alpha(1); with the reconstruction term
    # (1 - alpha(eps)) log2 V the whole is (1 - alpha(1)) log2 V
    a_end = p.alpha(np.float64(1.0), np)[0]
    tt = (np.arange(20000) + 0.5) / 20000
    integral = np.mean(-0.8 * p.alpha(0.2 + 0.8 * tt, np)[1]) * math.log2(V)
    assert integral + p.reconstruction_bpt() == pytest.approx((1 - a_end) * math.log2(V), rel=1e-6)


def test_uniform_network_bound_is_log_v():
    """nll_bpd of a uniform network: log2 V up to the Monte-Carlo error of its stratified times and masks."""
    V = 27
    p = Masked(vocab_size=V, likelihood_steps=64)
    x0 = jax.random.randint(jax.random.PRNGKey(0), (8, 256), 0, V)
    nll, terms, prior = p.nll_bpd(lambda xt, tt: jnp.zeros(xt.shape + (V,)), x0, jax.random.PRNGKey(2))
    assert terms.shape == (8, 64) and np.all(np.asarray(prior) == 0)
    assert float(jnp.mean(nll)) == pytest.approx(math.log2(V), rel=0.02)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_ancestral_sampling_reveals_every_token_from_the_network(schedule):
    """A network sure of token (l mod V) at position l: every sample is that sequence, no [MASK] left, whatever the
    step count; positions revealed along the way are never changed (the prediction at unmasked positions is wrong
    on purpose)."""
    V, L = 5, 12
    p = Masked(vocab_size=V, schedule=schedule)
    target = jnp.arange(L) % V
    calls = []

    def net(xt, tt):
        calls.append(1)
        sure = jax.nn.one_hot(target, V) * 50.0
        wrong = jax.nn.one_hot((target + 1) % V, V) * 50.0
        return jnp.where((xt == V)[..., None], sure[None], wrong[None])

    for steps in (1, 3, 16):
        x = p.sample(net, jax.random.PRNGKey(steps), (3, L), steps=steps)
        assert x.dtype == jnp.int32
        np.testing.assert_array_equal(x, np.broadcast_to(target, (3, L)))
    np.testing.assert_array_equal(p.prior_sample(None, (2, 3)), np.full((2, 3), V))
    assert list(np.asarray(p.prior_logp(jnp.array([[V, V], [V, 0]])))) == [0.0, -np.inf]


def test_ancestral_unmasking_rate():
    """After the first of n steps from all-[MASK], a token is revealed with probability alpha(1 - 1/n) (linear: 1/n):
    the fraction revealed in a long sequence is within 5 standard errors of it."""
    V, L, n = 4, 20000, 4
    p = Masked(vocab_size=V, schedule="linear")
    x = p.sample(lambda xt, tt: jnp.zeros(xt.shape + (V,)), jax.random.PRNGKey(0), (1, L), steps=1)
    assert int(jnp.sum(x == V)) == 0  # one step reveals all
    revealed = []

    def spy(xt, tt):  # traced once inside the sampler's loop: the callback records every call's input
        jax.debug.callback(lambda a: revealed.append(np.asarray(a)), xt)
        return jnp.zeros(xt.shape + (V,))

    p.sample(spy, jax.random.PRNGKey(1), (1, L), steps=n)
    assert len(revealed) == n and np.all(revealed[0] == V)
    frac = float(np.mean(revealed[1] != V))  # the state after the first step
    assert abs(frac - 1 / n) < 5 * math.sqrt((1 / n) * (1 - 1 / n) / L), frac
