"""Time samplers on the masked process (diffusion/masked.py; docs/method.md#time-samplers-on-the-masked-process): its
noise level (the masking rate) and log-odds against the time, the bell's masking rates and weights against the
Beta by hand under every schedule, unbiasedness of every importance-weighted sampler, which samplers tokens refuse,
and the learned sampler's reward as the reduction of the NELBO's per-t terms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import betainc

from config.fields import override
from config.registry import GAUSSIAN, INVERTIBLE
from config.schema import default_config
from config.validate import ConfigError, validate
from diffusion.masked import SCHEDULES, Masked
from samplers import StepContext, make_sampler

NOTHING = dict(step=None, key=None, x0=None, aux=None, params_before=None, params_after=None, rows_fn=None)


def text_config(sampler: str = "uniform", **kw):
    c = default_config(data="tiny_text", model="tokens", diffusion="masked", sampler=sampler, weighting="none")
    for section in (c.sample, c.eval.fid, c.eval.periodic):
        section.method = "ancestral"
    tiny = {"data.seq_len": 16, "model.hidden_size": 16, "model.depth": 1, "model.num_heads": 2}
    probe = {"sampler.adaptive.probe_batch_size": 8}  # the learned sampler's probes: the whole batch of 8
    return override(c, {**tiny, **probe, "train.batch_size": 8, "eval.fid.features": "none", **kw})


def sampler_on(process, name, batch=8, **fields):
    c = text_config(name, **{f"sampler.{name}.{k}": v for k, v in fields.items()})
    validate(c)
    return make_sampler(c.sampler, process, batch)


def masking_rate(p, t):
    """1 - alpha(s(t)) in float64: [B]."""
    return 1.0 - p.alpha(p.masking_time(np.asarray(t, np.float64)), np)[0]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("ends", ["truncate", "squeeze"])
def test_masking_rate_and_log_odds_give_back_the_time(schedule, ends):
    """The process's noise level is the masking rate and its log SNR the log-odds of keeping a token: their
    inverses return the time under every schedule and either end."""
    p = Masked(schedule=schedule, ends=ends, eps=0.01, power=3.0)
    t = jnp.linspace(0.02, 0.98, 49)
    m = jnp.asarray(masking_rate(p, t), jnp.float32)
    np.testing.assert_allclose(p.t_of_sigma(m), t, atol=1e-4)
    np.testing.assert_allclose(p.t_of_logsnr(p.logsnr(t)), t, atol=1e-4)
    np.testing.assert_allclose(jax.nn.sigmoid(p.logsnr(t)), 1.0 - m, rtol=1e-5)
    assert INVERTIBLE in Masked.offers(None) and GAUSSIAN not in Masked.offers(None)


# the time whose masking rate is 1/2 (the bell's median), by hand, with eps = 1e-3 and truncation:
# t = (s - eps) / (1 - eps), s from 1 - alpha(s) = 1/2
EPS = 1e-3
MEDIAN_TIME = {
    "linear": (0.5 - EPS) / (1 - EPS),  # s = 1/2
    "cosine": (2.0 / 3.0 - EPS) / (1 - EPS),  # cos(pi s / 2) = 1/2
    "cosine_md4": (1.0 / 3.0 - EPS) / (1 - EPS),  # sin(pi s / 2) = 1/2
    "polynomial": (0.5 ** (1.0 / 3.0) - EPS) / (1 - EPS),  # s^3 = 1/2
    "loglinear": (0.5 / (1 - EPS) - EPS) / (1 - EPS),  # (1 - eps) s = 1/2
}


@pytest.mark.parametrize("schedule", list(MEDIAN_TIME))
def test_bell_draws_the_same_masking_rates_under_every_schedule(schedule):
    """Beta(3, 3) over the masking rate whatever the schedule: mean 1/2, variance 1/28, P(m < 0.2) = I_0.2(3, 3);
    the median time is the schedule's own (by hand above), weight 1."""
    p = Masked(schedule=schedule, power=3.0)
    N = 20000
    t, w, _ = sampler_on(p, "bell").sample({}, jax.random.PRNGKey(0), jnp.zeros((N, 4), jnp.int32))
    m = masking_rate(p, t)
    se = math.sqrt(1 / 28 / N)
    assert abs(m.mean() - 0.5) < 5 * se
    assert abs(m.var() - 1 / 28) < 0.05 / 28
    below = betainc(3, 3, 0.2)
    assert abs(np.mean(m < 0.2) - below) < 5 * math.sqrt(below * (1 - below) / N)
    assert float(jnp.median(t)) == pytest.approx(MEDIAN_TIME[schedule], abs=0.01)
    np.testing.assert_array_equal(w, 1.0)


# the masking rate m(s) and dm/ds of each schedule, by hand (power 3)
RATE_BY_HAND = {
    "linear": lambda s: (s, np.ones_like(s)),
    "cosine": lambda s: (1 - np.cos(np.pi * s / 2), np.pi / 2 * np.sin(np.pi * s / 2)),
    "cosine_md4": lambda s: (np.sin(np.pi * s / 2), np.pi / 2 * np.cos(np.pi * s / 2)),
    "polynomial": lambda s: (s**3, 3 * s**2),
    "loglinear": lambda s: ((1 - EPS) * s, np.full_like(s, 1 - EPS)),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bell_importance_weights_by_hand(schedule):
    """w = 1 / (q(m) dm/dt), q = 0.9 Beta(m; 3, 3) + 0.1 = 0.9 * 30 m^2 (1 - m)^2 + 0.1, with s = eps + (1 - eps) t
    (dm/dt = (1 - eps) dm/ds) and m(s) of each schedule written out above."""
    p = Masked(schedule=schedule, power=3.0)
    sampler = sampler_on(p, "bell", importance_weights=True, uniform_mix=0.1)
    t, w, _ = sampler.sample({}, jax.random.PRNGKey(1), jnp.zeros((64, 4), jnp.int32))
    s = EPS + (1 - EPS) * np.asarray(t, np.float64)
    m, dm_ds = RATE_BY_HAND[schedule](s)
    q = 0.9 * 30 * m**2 * (1 - m) ** 2 + 0.1
    np.testing.assert_allclose(w, 1 / (q * (1 - EPS) * dm_ds), rtol=2e-3)


def uniform_integrand(p, t):
    """The masked NELBO's integrand of a uniform network (bits per token per unit of t, V = 27), in float64:
    -(ds/dt) alpha'(s) log2 V; its integral over t is (alpha(s(0)) - alpha(s(1))) log2 V."""
    _, da = p.alpha(p.masking_time(np.asarray(t, np.float64)), np)
    return -p.dmasking_time() * da * math.log2(27)


def moved(sampler, p, steps=12, batch=512):
    """The sampler's state after `steps` updates with a loss that grows with t (its density leaves uniform)."""
    x0 = jnp.zeros((batch, 4), jnp.int32)
    state = sampler.init(jax.random.PRNGKey(0), x0)
    for i in range(steps):
        t, _, _ = sampler.sample(state, jax.random.PRNGKey(100 + i), x0)
        loss = jnp.asarray(uniform_integrand(p, t) + 5.0 * np.asarray(t) ** 2, jnp.float32)
        ctx = StepContext(**NOTHING, t=t, losses=loss, mse=loss, loss_weight=jnp.ones_like(loss))
        state, _ = sampler.update(state, ctx)
    return state


@pytest.mark.parametrize(
    "name, fields",
    [
        ("bell", dict(importance_weights=True, uniform_mix=0.1)),
        ("adaptive_noise", {}),
        ("loss_second_moment", {}),
        ("adaptive", dict(importance_weights=True, policy_channels=(4,), policy_hidden=(8,))),
    ],
)
def test_importance_weighted_samplers_keep_the_masked_bound(name, fields):
    """E_p[w f(t)] = int f dt for the integrand f of a uniform network on the cosine schedule: the weighted loss is
    an unbiased estimate of the bound's diffusion term (within 5 standard errors of 200,000 draws), with a density
    that is not uniform (the loss-driven ones after updates with a loss that grows with t)."""
    p = Masked(schedule="cosine")
    sampler = sampler_on(p, name, **fields)
    state = (
        moved(sampler, p)
        if name in ("adaptive_noise", "loss_second_moment")
        else sampler.init(jax.random.PRNGKey(0), jnp.zeros((8, 4), jnp.int32))
    )
    N = 200_000
    t, w, _ = sampler.sample(state, jax.random.PRNGKey(7), jnp.zeros((N, 4), jnp.int32))
    wf = np.asarray(w, np.float64) * uniform_integrand(p, t)
    want = (p.alpha(np.float64(EPS), np)[0] - 0.0) * math.log2(27)  # alpha(s(0)) = cos(pi eps / 2), alpha(1) = 0
    se = wf.std() / math.sqrt(N)
    assert abs(wf.mean() - want) < 5 * se and se < 0.01 * want, (wf.mean(), want, se)
    if name != "adaptive":  # the policy starts near uniform (Beta(0.974, 0.974))
        assert float(jnp.max(w) / jnp.min(w)) > 1.5


@pytest.mark.parametrize(
    "name, message",
    [
        ("lognormal", "config.sampler.name='lognormal' is not allowed with config.diffusion.name='masked': it offers "
         "no gaussian"),
        ("infonoise", "config.sampler.name='infonoise' is not allowed with config.diffusion.name='masked': it offers "
         "no gaussian"),
        ("grad_variance", "config.sampler.name='grad_variance' is not allowed with config.diffusion.name='masked'"),
    ],
)  # fmt: skip
def test_tokens_refuse_the_samplers_of_a_gaussian_path_or_a_chain(name, message):
    with pytest.raises(ConfigError) as e:
        validate(text_config(name))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["uniform", "antithetic", "bell", "logitnormal", "adaptive_noise",
                                  "loss_second_moment", "adaptive"])  # fmt: skip
def test_tokens_accept_every_sampler_that_has_a_meaning_there(name):
    validate(text_config(name))


def test_bell_on_the_chain_is_refused_in_one_line():
    from conftest import tiny_config

    with pytest.raises(ConfigError) as e:
        validate(tiny_config(**{"sampler.name": "bell"}))
    assert str(e.value) == (
        "config.sampler.name='bell' is not allowed with the discrete-time process 'ddpm': it draws a continuous "
        "noise level, not a chain's steps; use logitnormal (a bell of the chain's levels)"
    )


def test_learned_samplers_reward_is_the_reduction_of_the_nelbo_terms():
    """The learned sampler's bound reward on tokens: for each probe sequence and time, the masked NELBO's integrand
    (Masked.row_terms, bits per token per unit of t) under the parameters before the update minus after, with the
    same masks (common noise), times one grid cell's share 1 / grid."""
    from diffusion import make_process
    from models import make_model
    from training.step import make_apply, make_rows_fn
    from weightings import make_weighting

    c = text_config("adaptive")
    process = make_process(c.diffusion)
    model = make_model(c.model, out_channels=process.out_channels(1))
    sampler = make_sampler(c.sampler, process, 8)
    x0 = jax.random.randint(jax.random.PRNGKey(0), (4, 16), 0, 27)
    before = model.init(jax.random.PRNGKey(1), x0, jnp.zeros((4,)))
    jitter = lambda k: jax.tree.map(lambda q: q + 0.05 * jax.random.normal(k, q.shape), before)
    before, after = jitter(jax.random.PRNGKey(2)), jitter(jax.random.PRNGKey(3))
    rows_fn = make_rows_fn(model, process, weighting=make_weighting(c.weighting, process))
    ctx = StepContext(**dict(NOTHING, params_before=before, params_after=after, rows_fn=rows_fn), t=None, losses=None)
    ts, key = jnp.array([0.1, 0.5, 0.9]), jax.random.PRNGKey(4)
    got = sampler._delta(ctx, x0, None, ts, key)
    x0r, tr = jnp.repeat(x0, 3, axis=0), jnp.tile(ts, 4)
    noise = process.draw_noise(jax.random.split(key, 4)[0], x0r)  # bound_reduction's key for the masks
    apply = make_apply(model)
    terms = lambda q: process.row_terms(lambda x, s: apply(q, x, s), x0r, tr, noise)
    want = ((terms(before) - terms(after)) / c.diffusion.grid).reshape(4, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-8)
    assert float(jnp.max(jnp.abs(want))) > 1e-5


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_learned_sampler_trains_on_tiny_text(tmp_path):
    """Four steps of the learned sampler on the tiny corpus through the train function: policy updates at steps 0
    and 2 whose reward, the reduction of the NELBO's per-t terms, is finite and not zero."""
    from drivers.train import train
    from training.report import read_metrics

    learned = dict(update_every=2, probe_batch_size=8, sweep_stride=250, num_selected=2, policy_channels=(4,),
                   policy_hidden=(8,))  # fmt: skip
    c = text_config(
        "adaptive",
        **{f"sampler.adaptive.{k}": v for k, v in learned.items()},
        **{"train.num_steps": 4, "train.log_every": 1, "train.ckpt_every": 4, "train.warmup_steps": 2},
        **{"sample.num": 2, "sample.steps": 2, "eval.periodic.every": 0},
    )
    train(c, str(tmp_path))
    rows = [r for r in read_metrics(str(tmp_path / "metrics.jsonl")) if "sampler/updates" in r]
    assert [int(r["sampler/updates"]) for r in rows] == [1, 1, 2, 2]
    assert all(np.isfinite(r["sampler/reward_mean"]) for r in rows) and rows[-1]["sampler/reward_mean"] != 0
