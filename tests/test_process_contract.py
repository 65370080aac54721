"""Adding a diffusion process is one file: a process defined here (a variance-preserving path with the cosine
schedule alpha = cos(pi t / 2), sigma = sin(pi t / 2), v target, the exact ODE likelihood), registered here, trained
3 steps with the learned sampler and Min-SNR weighting, resumed exactly and evaluated, without editing any other
file of the project; and the same path written on the bare contract (Process alone: the path, its target and loss,
the time domain, the prior), which trains and says what it cannot do (sample, evaluate, feed a bound reward). Also: a
process that leaves a member of the contract out is refused in one line; the time domain answers as the samplers used
to, bit for bit; and the project keeps its discrete/continuous branches in at most 3 places."""

import math
import os
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.fields import Choice, Int, override
from config.registry import CONTINUOUS, FIXED_SCHEDULE, GAUSSIAN, INVERTIBLE, LIKELIHOOD, SAMPLING
from conftest import ROOT, TINY, full_and_resumed
from diffusion import PROCESSES, make_process
from diffusion.base import Gaussian, Process, Sampling
from diffusion.continuous import ContinuousProcess, ODELikelihood
from diffusion.likelihood import standard_normal_logp
from diffusion.time import ContinuousTime, DiscreteTime, TimeDomain


class CosinePath(ContinuousProcess, ODELikelihood):
    """x_t = cos(pi t / 2) x0 + sin(pi t / 2) eps: log SNR = -2 log tan(pi t / 2), from +inf at t = 0 to -inf at 1,
    the prior N(0, I) at t = 1 exactly. Target v = alpha eps - sigma x0 (finite x0 and eps at both ends)."""

    name = "toy_cosine"
    FIELDS = dict(target=Choice("v", ("v",)), grid=Int(1000, 2), likelihood_steps=Int(4, 1))

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.target, cfg.grid, likelihood_steps=cfg.likelihood_steps)

    def alpha_sigma(self, t):
        t = jnp.asarray(t, jnp.float32)
        return jnp.cos(0.5 * jnp.pi * t), jnp.sin(0.5 * jnp.pi * t)

    def logsnr(self, t):
        return -2.0 * jnp.log(jnp.tan(0.5 * jnp.pi * jnp.asarray(t, jnp.float32)))

    def t_of_logsnr(self, lam):
        return jnp.arctan(jnp.exp(-0.5 * lam)) / (0.5 * jnp.pi)

    def t_of_sigma(self, n):
        return jnp.arcsin(jnp.clip(n, 0.0, 1.0)) / (0.5 * jnp.pi)


class BareCosine(Process, Gaussian):
    """The same path on the bare contract (and the Gaussian path's members), eps target: what docs/extending.md
    shows whole."""

    name = "toy_bare"
    time_domain = ContinuousTime
    FIELDS = dict(grid=Int(1000, 2))

    def __init__(self, grid):  # every field by keyword (Process.from_config)
        self.grid = grid

    def alpha_sigma(self, t):
        t = jnp.asarray(t, jnp.float32)
        return jnp.cos(0.5 * jnp.pi * t), jnp.sin(0.5 * jnp.pi * t)

    def logsnr(self, t):
        a, s = self.alpha_sigma(t)
        return 2.0 * (jnp.log(a) - jnp.log(s))

    def path_coefs(self, t):  # x_t = a x0 + s eps; target 0 x0 + 1 eps
        a, s = self.alpha_sigma(t)
        return a, s, jnp.zeros_like(a), jnp.ones_like(a)

    def x0_mse_factor(self, t):  # an eps error is SNR times the x0 error it implies
        return jnp.exp(self.logsnr(t))

    def q_sample(self, x0, t, noise):
        a, s = self.alpha_sigma(t)
        return a[:, None, None, None] * x0 + s[:, None, None, None] * noise

    def training_target(self, x0, t, noise):
        return noise

    def example_losses(self, apply_fn, x0, t, noise):
        out = apply_fn(self.q_sample(x0, t, noise), 1000.0 * t)
        mse = jnp.mean((out - noise) ** 2, axis=(1, 2, 3))
        return mse, jnp.zeros_like(mse)

    def predict_x0(self, xt, t, out):
        a, s = self.alpha_sigma(t)
        return (xt - s[:, None, None, None] * out) / a[:, None, None, None]

    def prior_sample(self, key, shape):
        return jax.random.normal(key, shape, jnp.float32)

    def prior_logp(self, x):
        return standard_normal_logp(x)


@pytest.fixture
def toy():
    yield PROCESSES.register(CosinePath)  # pytest runs the rest at teardown, failed or not
    PROCESSES.unregister(CosinePath.name)


def toy_config(**overrides):
    from config.schema import default_config

    c = default_config(data="digits", model="unet", diffusion="toy_cosine", sampler="adaptive", weighting="min_snr")
    tiny = {k: v for k, v in TINY.items() if not k.startswith("sample.")}
    methods = {f"{k}.method": "heun" for k in ("sample", "eval.fid", "eval.periodic")}
    return override(c, {**tiny, **methods, "sample.steps": 3, "sample.num": 4, **overrides})


@pytest.mark.slow  # end to end, over 20 s: CI's second job
def test_a_process_defined_in_a_test_trains_resumes_and_evaluates(toy, tmp_path):
    from config.validate import validate
    from diffusion.generate import sampling_fn
    from evaluation.bound import bound_bpd
    from weightings import make_weighting

    c = toy_config()
    validate(c)  # the parts' needs (the learned sampler, Min-SNR) against what the process offers
    p = make_process(c.diffusion)
    assert isinstance(p, Process) and isinstance(p.time, ContinuousTime) and p.time.size == 1000
    assert p.exact_likelihood and type(p).offers(c.diffusion) == {
        CONTINUOUS,
        GAUSSIAN,
        INVERTIBLE,
        FIXED_SCHEDULE,
        SAMPLING,
        LIKELIHOOD,
    }
    # Min-SNR-5 on v: min(SNR, 5) / (SNR + 1) = min(alpha^2, 5 sigma^2) here, at t = 1/2 (SNR 1): 1/2
    w = make_weighting(c.weighting, p)(jnp.array([0.5, 0.1]))
    np.testing.assert_allclose(w, [0.5, 5 * math.sin(0.05 * math.pi) ** 2], rtol=1e-5)

    # 3 steps: 1, a real checkpoint, then 2 more from it, against 3 in one go (policy updates at steps 0 and 2)
    setup, full, resumed = full_and_resumed(c, tmp_path, steps=3)
    chex.assert_trees_all_equal(full, resumed)  # bit for bit: model, optimizer, EMA, the policy and its buffer
    assert int(full.sampler_state.updates) == 2
    assert np.any(full.sampler_state.sweep_rows != 0)  # the sweep ran

    batch = setup.example_batch(c.train.batch_size)
    images = np.asarray(batch["image"] if isinstance(batch, dict) else batch)[:8]
    mean, per_image, _ = bound_bpd(setup, full.ema_params, images, jax.random.PRNGKey(0), num_t=3)
    assert np.all(np.isfinite(per_image)) and 0 < mean < 100
    x = sampling_fn(setup, "heun", 3, (8, 8, 8, 1))(full.ema_params, jax.random.PRNGKey(1), None)
    assert x.shape == (8, 8, 8, 1) and x.dtype == jnp.uint8


def test_the_bare_contract_trains_and_says_what_it_cannot_do(tmp_path, capsys):
    """Process alone, 9 members and a time domain: the offer derived from what the class defines; 2 steps of
    training through main.py's path (no sample grid, the pictures written); the learned sampler's bound reward and
    --mode=eval each refused in one line naming the field or mode, the process and what to use."""
    import main
    from config.schema import default_config
    from config.validate import ConfigError, validate

    assert isinstance(ContinuousTime(4), TimeDomain) and isinstance(DiscreteTime(4), TimeDomain)
    PROCESSES.register(BareCosine)
    try:
        c = default_config(data="digits", model="unet", diffusion="toy_bare", sampler="uniform")
        c = override(c, {**TINY, "train.num_steps": 2})
        validate(c)  # sample.method is not read: the process does not sample
        assert BareCosine.offers(c.diffusion) == {CONTINUOUS, GAUSSIAN, FIXED_SCHEDULE}  # no inverses, no mixins
        assert main.run(c, str(tmp_path / "run")) == 0
        out = capsys.readouterr().out
        assert "Samples: none (config.diffusion.name='toy_bare' does not sample)" in out
        assert os.path.exists(tmp_path / "run" / "timesteps.png") and not os.path.exists(tmp_path / "run" / "samples")
        assert main.run(c, str(tmp_path / "run"), "eval") == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            "error: --mode=eval is not allowed with config.diffusion.name='toy_bare': it reports the test likelihood, "
            "which the process does not offer (diffusion.base.Likelihood)"
        )
        c.sampler.name = "adaptive"
        with pytest.raises(ConfigError) as e:
            validate(c)
        assert str(e.value) == (
            "config.sampler.adaptive.reward='bound' is not allowed with config.diffusion.name='toy_bare': its reward "
            "reads the bound's terms; use loss"
        )
        c.sampler.adaptive.reward = "loss"
        validate(c)
    finally:
        PROCESSES.unregister(BareCosine.name)


def test_a_process_missing_a_member_of_the_contract_is_refused_in_one_line():
    class Half(Process, Gaussian):
        name = "half"
        time_domain = ContinuousTime

        @classmethod
        def from_config(cls, cfg):
            return cls()

    with pytest.raises(ValueError) as e:
        PROCESSES.register(Half)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("diffusion process 'half' lacks the contract's ")
    for member in ("example_losses", "logsnr", "path_coefs", "predict_x0", "prior_logp", "prior_sample"):
        assert member in msg, msg
    assert "half" not in PROCESSES
    with pytest.raises(ValueError, match=r"'sampling_half' lacks the contract's sample \("):
        PROCESSES.register(type("SamplingHalf", (BareCosine, Sampling), {"name": "sampling_half"}))
    with pytest.raises(ValueError, match=r"'no_domain' lacks the contract's time_domain \("):
        PROCESSES.register(type("NoDomain", (BareCosine,), {"name": "no_domain", "time_domain": None}))

    class NoPath(ContinuousProcess, ODELikelihood):  # the continuous base needs the path itself
        name = "no_path"
        from_config = CosinePath.from_config

    with pytest.raises(ValueError, match=r"'no_path' lacks the contract's alpha_sigma, logsnr \("):
        PROCESSES.register(NoPath)
    with pytest.raises(ValueError, match="must subclass diffusion.base.Process"):
        PROCESSES.register(type("Loose", (), {"name": "loose"}))


def test_the_time_domains_against_their_formulas():
    """Uniform draws, the unit maps and the probability of a cell, against their formulas."""
    key = jax.random.PRNGKey(3)
    d, c = DiscreteTime(1000), ContinuousTime(50)
    np.testing.assert_array_equal(d.uniform(key, 64), jax.random.randint(key, (64,), 0, 1000, dtype=jnp.int32))
    np.testing.assert_array_equal(c.uniform(key, 64), jax.random.uniform(key, (64,), jnp.float32))
    assert d.uniform(key, 4).dtype == d.dtype == jnp.int32 and c.uniform(key, 4).dtype == c.dtype == jnp.float32
    u = jnp.array([0.0, 0.0004, 0.0006, 0.4995, 0.5, 0.9999, 1.0], jnp.float32)
    np.testing.assert_array_equal(d.from_unit(u, "floor"), [0, 0, 0, 499, 500, 999, 999])
    np.testing.assert_array_equal(d.from_unit(u, "nearest"), [0, 0, 1, 499, 500, 999, 999])  # round(u 999)
    np.testing.assert_array_equal(c.from_unit(u), u)
    # the mass of a step's rounding cell [(t - 1/2) / 999, (t + 1/2) / 999) under a uniform u: 1/999, halved at the ends
    cdf = lambda x: x
    np.testing.assert_allclose(
        d.probability(jnp.array([0, 500, 999]), cdf, None), [0.5 / 999, 1 / 999, 0.5 / 999], rtol=1e-5
    )
    assert float(c.probability(jnp.array([0.3]), None, lambda t: jnp.log(2 * t))[0]) == pytest.approx(0.6)
    # bins, the pictures' extent, one grid cell's share of the bound, the learned sampler's first selection
    np.testing.assert_array_equal(d.bins(jnp.array([0, 99, 100, 999]), 10), [0, 0, 1, 9])
    np.testing.assert_array_equal(c.bins(jnp.array([0.0, 0.0999, 0.1, 1.0]), 10), [0, 0, 1, 9])
    assert (d.extent, c.extent, d.cell_share, c.cell_share) == (1000, 1.0, 1.0, 1 / 50)
    grid = c.sweep(None, 1)
    np.testing.assert_allclose(grid[:2], [0.01, 0.03], rtol=1e-6)
    np.testing.assert_array_equal(d.first(None, 3), [0, 1, 2])
    np.testing.assert_array_equal(c.first(grid, 3), grid[:3])


def test_the_chain_maps_a_noise_level_to_its_nearest_step():
    from diffusion import DDPM, make_schedule

    p = DDPM(make_schedule("linear", 1000))
    ab = p.alphas_cumprod_np()
    sig = np.sqrt((1 - ab) / ab)
    for t in (0, 1, 300, 998, 999):
        assert int(p.t_of_logsnr(jnp.asarray([-2 * math.log(sig[t])], jnp.float32))[0]) == t
    mid = 0.5 * (sig[500] + sig[501])  # just either side of the midpoint between steps 500 and 501
    lam = -2 * np.log(np.array([mid * (1 - 1e-5), mid * (1 + 1e-5)]))
    np.testing.assert_array_equal(p.t_of_logsnr(jnp.asarray(lam, jnp.float32)), [500, 501])
    np.testing.assert_allclose(p.logsnr(jnp.arange(1000)), p.logsnr_np().astype(np.float32))


# Tests of the time domain (which one a process has) in the project's code: what the domain classes do for the parts
DOMAIN_TESTS = re.compile(
    r"\.discrete\b|isinstance\([^)]*(DiscreteTime|ContinuousTime)|capability\s*==\s*\"(discrete|continuous)\""
    r"|\"num_timesteps\"\s+in\b"
)


def project_sources():
    skip = {"tests", "notebooks", "workdirs", "venv"}
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in skip]
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(d, f)


def test_at_most_three_places_tell_the_time_domains_apart_and_no_part_reads_a_schedule_table():
    tests, tables = [], []
    for path in project_sources():
        rel = os.path.relpath(path, ROOT)
        with open(path) as f:
            for i, line in enumerate(f, 1):
                code = line.split("#")[0]
                if DOMAIN_TESTS.search(code):
                    tests.append(f"{rel}:{i}: {line.strip()}")
                if not rel.startswith("diffusion") and re.search(r"\.schedule\.|\bnp64\b", code):
                    tables.append(f"{rel}:{i}: {line.strip()}")
    assert len(tests) <= 3, "\n".join(tests)
    assert not tables, "\n".join(tables)
