import math

import numpy as np
import pytest

from diffusion.schedules import make_schedule


def test_linear_matches_ddpm_values():
    s = make_schedule("linear", 1000).np64
    assert s["betas"][0] == pytest.approx(1e-4)
    assert s["betas"][999] == pytest.approx(0.02)
    assert s["betas"][500] == pytest.approx(1e-4 + 500 * (0.02 - 1e-4) / 999)
    # alpha_bar_t = prod (1 - beta_i), by hand for t = 0, 1
    assert s["alphas_cumprod"][0] == pytest.approx(1 - 1e-4)
    b1 = 1e-4 + (0.02 - 1e-4) / 999
    assert s["alphas_cumprod"][1] == pytest.approx((1 - 1e-4) * (1 - b1))
    assert s["alphas_cumprod"][999] == pytest.approx(4.036e-5, rel=1e-3)  # known DDPM value


def test_linear_scales_with_T():
    s = make_schedule("linear", 100).np64
    assert s["betas"][0] == pytest.approx(1e-3) and s["betas"][-1] == pytest.approx(0.2)


def test_quad_endpoints_and_midpoint():
    s = make_schedule("quad", 1000).np64
    assert s["betas"][0] == pytest.approx(1e-4)
    assert s["betas"][999] == pytest.approx(0.02)
    mid = (math.sqrt(1e-4) + 500 * (math.sqrt(0.02) - math.sqrt(1e-4)) / 999) ** 2
    assert s["betas"][500] == pytest.approx(mid)


def test_cosine_matches_closed_form():
    s = make_schedule("cosine", 1000).np64
    f = lambda u: math.cos((u + 0.008) / 1.008 * math.pi / 2) ** 2
    for t in (0, 1, 500, 900):
        assert s["alphas_cumprod"][t] == pytest.approx(f((t + 1) / 1000) / f(0), rel=1e-9)
    assert s["betas"][999] == pytest.approx(0.999)  # clipped


@pytest.mark.parametrize("name", ["linear", "cosine", "quad"])
def test_posterior_tables(name):
    s = make_schedule(name, 1000).np64
    for t in (1, 10, 999):
        b, ab, abp = s["betas"][t], s["alphas_cumprod"][t], s["alphas_cumprod"][t - 1]
        assert s["posterior_variance"][t] == pytest.approx(b * (1 - abp) / (1 - ab))
        assert s["posterior_mean_coef1"][t] == pytest.approx(b * math.sqrt(abp) / (1 - ab))
        assert s["posterior_mean_coef2"][t] == pytest.approx((1 - abp) * math.sqrt(1 - b) / (1 - ab))
    assert s["posterior_variance"][0] == 0.0
    assert s["posterior_log_variance_clipped"][0] == pytest.approx(np.log(s["posterior_variance"][1]))
    assert s["snr"][5] == pytest.approx(s["alphas_cumprod"][5] / (1 - s["alphas_cumprod"][5]))


@pytest.mark.parametrize("name", ["linear", "cosine"])
def test_forward_variance_comes_from_float64_tables(name):
    """1 - alpha_bar and its log are kept from float64 (as improved-diffusion): at t = 0, where 1 - alpha_bar is
    1e-4, computing it in float32 at call time was off by 1.7e-4 relative (5e-4 for cosine)."""
    import jax.numpy as jnp

    from diffusion import DDPM

    s = make_schedule(name, 1000)
    t = jnp.array([0, 1, 500, 999])
    _, var, logvar = DDPM(s).q_mean_variance(jnp.zeros((4, 1)), t)
    exact = 1.0 - s.np64["alphas_cumprod"][np.asarray(t)]
    np.testing.assert_allclose(np.asarray(var)[:, 0], exact, rtol=1e-7)
    np.testing.assert_allclose(np.asarray(logvar)[:, 0], np.log(exact), rtol=1e-6)
    naive = 1.0 - np.float32(s.alphas_cumprod[0])  # what float32 at call time gives
    assert abs(naive / exact[0] - 1) > 1e-5  # the error the tables remove
