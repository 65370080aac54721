"""The contract of a diffusion process and the registry of processes (config.diffusion, flat layout:
config.diffusion.name and the named process's own fields).

`Process` is what the train step (training/step.py), the timestep samplers (samplers/), the loss weightings
(weightings/) and the set-up (training/setup.py) use: the config side, the time domain, the data and noise the step
draws, the forward process and its loss, and the prior, with shapes and units. Four mixins add what a process may
opt into, each a capability (config/registry.py) that parts and modes ask for: `NoiseLevel` (a log SNR and a noise
level in (0, 1) with their inverses: the samplers that place a density on them), `Gaussian` (a Gaussian path x_t =
alpha x0 + sigma eps, a NoiseLevel with a regression target: the loss weightings, the samplers that work on the
x0-MSE), `Sampling` (a sampler of data: sample grids, FID, text samples) and `Likelihood` (a test likelihood and the
bound's rows: --mode=eval, the learned sampler's bound reward). A process subclasses Process (and
the mixins it offers) and is registered with `@PROCESSES.register`; registering one that leaves an abstract member
out is refused in one line naming the members. ddpm.py implements all of it on the discrete chain, continuous.py the
path math and sampling for every Gaussian path in continuous time (vp.py, flow.py, edm.py give only their path, their
prior if it is not N(0, I), and their likelihood); masked.py is a process on tokens that is not Gaussian (a noise
level, the masking rate, but no Gaussian path and no MSE). docs/extending.md shows the whole of a new process.

Conventions: images x0, x_t, noise are float32 [B, H, W, C] (pixels in [-1, 1]); tokens are int32 [B, L] (masked.py,
its noise uniform [B, L]); t is [B] in the process's time domain (`time`: int32 steps 0..T-1, or float32 in [0, 1],
t = 0 data, t = 1 noise); `apply_fn(x_t, t)` runs the network and returns its output [B, H, W, out_channels(C)] (for
tokens logits [B, L, V]); bits/dim are per dimension (pixel channel, or token) in bits (nats / (D ln 2)).
"""

import abc
import functools
import inspect

import jax
import jax.numpy as jnp

from config.registry import FIXED_SCHEDULE, FLAT, GAUSSIAN, INVERTIBLE, LIKELIHOOD, SAMPLING, Registry


def to_float(images_u8):
    """uint8 [0, 255] -> float32 [-1, 1]; float data (pre-encoded latents) passes unchanged."""
    if jnp.issubdtype(images_u8.dtype, jnp.floating):
        return images_u8.astype(jnp.float32)
    return images_u8.astype(jnp.float32) / 127.5 - 1.0


def to_u8(x):
    """[-1, 1] -> uint8 [0, 255]."""
    return jnp.round((x + 1.0) * 127.5).clip(0, 255).astype(jnp.uint8)


def _overrides(cls, name: str, base) -> bool:
    """Whether class `cls` defines `name` other than `base` does."""
    return getattr(cls, name) is not getattr(base, name)


class Process(abc.ABC):
    """What every diffusion process offers (module docstring). Abstract members raise at registration; the others
    have defaults here, which a process overrides where it differs."""

    name: str = "base"  # the registered name, config.diffusion.name
    FIELDS: dict = {}  # its own config fields (config/fields.py), flat in config.diffusion
    time_domain = None  # its time domain's class (diffusion/time.py: DiscreteTime or ContinuousTime): required
    time_field: str = "grid"  # the field giving the time domain's size (T, or the grid): bounds "T" of other fields
    learned_variance = False  # the network also outputs the reverse variance (DDPM's learned_range)
    vocab_size: int = 0  # data of tokens: x0 int32 [B, L] in 0..vocab_size-1 (masked.py); 0 for continuous data

    # -- the config side (classmethods: before anything is built) -------------------------------------------------
    @classmethod
    def from_config(cls, cfg) -> "Process":
        """The process from its own config section (config.diffusion): its constructor with every field of FIELDS
        by keyword (override where the constructor takes something else, as DDPM's schedule)."""
        return cls(**{k: cfg[k] for k in cls.FIELDS})

    @classmethod
    def field_values(cls, given: dict) -> dict:
        """{field: value} of every field of FIELDS, its default (written there once) where `given` (keyword
        arguments of a constructor) has none; a name that is not a field raises TypeError naming the fields."""
        unknown = sorted(set(given) - set(cls.FIELDS))
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)} (its fields: {', '.join(cls.FIELDS)})")
        return {k: spec.default for k, spec in cls.FIELDS.items()} | given

    @classmethod
    def offers(cls, cfg) -> set:
        """What samplers, weightings and modes may need of it, a set of config.registry CAPABILITIES, derived from
        what the class defines: its time domain's (DISCRETE or CONTINUOUS); GAUSSIAN where it opts into the Gaussian
        mixin; INVERTIBLE where it has a noise level (NoiseLevel, which Gaussian extends) and defines both
        t_of_logsnr and t_of_sigma; FIXED_SCHEDULE where it keeps
        init_params and bind (no parameters of its own); SAMPLING and LIKELIHOOD where it opts into the mixins. A
        process whose offer depends on its config (VP's learned schedule) narrows this, once, here."""
        out = {cls.time_domain.capability}
        if issubclass(cls, Gaussian):
            out.add(GAUSSIAN)
        level = issubclass(cls, NoiseLevel)
        if level and _overrides(cls, "t_of_logsnr", NoiseLevel) and _overrides(cls, "t_of_sigma", NoiseLevel):
            out.add(INVERTIBLE)
        if not (_overrides(cls, "init_params", Process) or _overrides(cls, "bind", Process)):
            out.add(FIXED_SCHEDULE)
        if issubclass(cls, Sampling):
            out.add(SAMPLING)
        if issubclass(cls, Likelihood):
            out.add(LIKELIHOOD)
        return out

    @classmethod
    def lacks(cls, capability: str, cfg) -> tuple:
        """(where, why) of a refusal: the process named as a config phrase, and why it lacks `capability`."""
        return f"config.diffusion.name={cfg.name!r}", f"it offers no {capability}"

    # -- time ------------------------------------------------------------------------------------------------------
    @functools.cached_property
    def time(self):
        """The time domain (diffusion/time.py): time_domain(the value of its time_field), e.g. DiscreteTime(T) or
        ContinuousTime(grid)."""
        return self.time_domain(int(getattr(self, self.time_field)))

    # -- the data and the noise the train step draws ---------------------------------------------------------------
    def data_in(self, batch):
        """A batch of the dataset as this process's x0: uint8 pixels -> float32 in [-1, 1], float latents as
        float32 (to_float)."""
        return to_float(batch)

    def data_out(self, x):
        """Samples (decoded, for a latent model) as the dataset's data: pixels in [-1, 1] -> uint8 (to_u8)."""
        return to_u8(x)

    def draw_noise(self, key, x0):
        """The noise of the forward process for x0 [B, ...] (the train step's, and the samplers' probes'): standard
        normal eps, float32 [B, ...]."""
        return jax.random.normal(key, x0.shape, jnp.float32)

    # -- forward process and training ------------------------------------------------------------------------------
    @abc.abstractmethod
    def q_sample(self, x0, t, noise):
        """x_t [B, ...] from x0, t [B] and the noise [B, ...] (draw_noise's)."""

    @abc.abstractmethod
    def example_losses(self, apply_fn, x0, t, noise):
        """(mse [B], extra [B]) from one call of the network: the MSE of its output against the target (the loss
        weighting multiplies it; a process that is not Gaussian gives its own per-example loss here) and a term added
        as it is (a learned variance's or a learned schedule's; zeros otherwise). The train step's loss is
        mean(w_sampler (w(t) mse + extra))."""

    def example_mse(self, apply_fn, x0, t, noise):
        """The first of example_losses: [B]."""
        return self.example_losses(apply_fn, x0, t, noise)[0]

    # -- the network's output and parameters ------------------------------------------------------------------------
    def out_channels(self, channels: int) -> int:
        """Channels of the network's output for data of `channels` channels."""
        return channels

    def init_params(self, key, variables):
        """The model's variables with the process's own parameters added (where it lacks FIXED_SCHEDULE); unchanged
        here."""
        return variables

    def bind(self, params):
        """The process at the model's variables `params` (a learned schedule reads its own); itself here."""
        return self

    # -- the prior ------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def prior_sample(self, key, shape):
        """A draw of the prior at the noise end, where sampling starts: [shape] float32 (a token process: int32)."""

    @abc.abstractmethod
    def prior_logp(self, x):
        """log density of the prior at x [B, ...]: [B] nats."""


class NoiseLevel(abc.ABC):
    """A noise level that samplers place their densities on (capability INVERTIBLE where the process defines both
    inverses): log SNR lambda(t), decreasing in t, and the level n in (0, 1) that the logit-normal and bell samplers
    draw. On a Gaussian path lambda = log(alpha^2 / sigma^2); on the masked process lambda = log(alpha / (1 - alpha)),
    the log-odds that a token is kept, and n the masking rate 1 - alpha (diffusion/masked.py)."""

    @abc.abstractmethod
    def logsnr(self, t):
        """log SNR at t [B]: float32 [B] (-inf where there is no signal)."""

    def t_of_logsnr(self, lam):
        """The time of log SNR lam [B] (clipped into the domain; on a chain the step of the nearest noise level):
        [B] in the domain's dtype. Only where it offers INVERTIBLE."""
        raise NotImplementedError(f"the process {self.name!r} has no inverse of its log SNR")

    def t_of_sigma(self, n):
        """The time whose noise level is n [B], in (0, 1) (clipped into the domain): [B]. The level is the
        logit-normal and bell samplers' variable: the variance-preserving sqrt(sigmoid(-log SNR)) on a VP path, a
        chain and EDM, t itself on a flow (SD3's sampler), the masking rate 1 - alpha on the masked process. Only
        where it offers INVERTIBLE."""
        raise NotImplementedError(f"the process {self.name!r} has no inverse of its noise level")


class Gaussian(NoiseLevel):
    """A process on a Gaussian path (capability GAUSSIAN): x_t = alpha x0 + sigma eps, its log SNR
    log(alpha^2 / sigma^2) as the noise level (NoiseLevel), the network's regression target and the factors between
    target and x0 MSEs. The loss weightings (which are functions of these coefficients) and the samplers that work on
    the x0-MSE need it; a process on tokens does not offer it."""

    @abc.abstractmethod
    def path_coefs(self, t):
        """(alpha, sigma, c1, c2) at t [B], each float32 [B]: x_t = alpha x0 + sigma eps (alpha, sigma scaled as
        the process's own variables) and the network's target c1 x0 + c2 eps (the loss weightings'
        weightings/base.py)."""

    @abc.abstractmethod
    def x0_mse_factor(self, t):
        """F(t) [B]: the target's MSE is F times the x0-MSE at the same x_t (eps: SNR; x0: 1; weightings/base.py)."""

    def x0_mse_factor_per_snr(self, t):
        """F(t) / SNR(t) [B]: the objective's weight on the x0-MSE relative to the bound's (eps: 1; x0: 1 / SNR; a
        flow's velocity: 1 / (1 - t)^2), finite at a data end where SNR is infinite (t = 0 exactly, a possible float
        draw in continuous time), where the quotient would be inf / inf: there it is the limit from path_coefs,
        (c1 sigma - c2 alpha)^2 / alpha^2 = c2^2. Infinite where alpha = 0 (the noise end)."""
        F, snr = self.x0_mse_factor(t), jnp.exp(self.logsnr(t))
        a, s, c1, c2 = self.path_coefs(t)
        return jnp.where(jnp.isinf(snr), (c1 * s - c2 * a) ** 2 / a**2, F / snr)

    # -- discrete-time tables (read only by parts that need DISCRETE) ----------------------------------------------
    def logsnr_np(self):
        """log SNR of every step: [T] float64."""
        raise NotImplementedError(f"the process {self.name!r} has no table of steps")

    def alphas_cumprod_np(self):
        """alpha_bar of every step, the signal's variance in x_t: [T] float64."""
        raise NotImplementedError(f"the process {self.name!r} has no table of steps")

    def snr_np(self):
        """SNR of every step: [T] float64."""
        raise NotImplementedError(f"the process {self.name!r} has no table of steps")

    def noise_levels_np(self):
        """The noise coefficient of every step, sqrt(1 - alpha_bar): [T] float64."""
        raise NotImplementedError(f"the process {self.name!r} has no table of steps")

    @abc.abstractmethod
    def training_target(self, x0, t, noise):
        """What the network regresses at x_t: [B, ...]."""

    @abc.abstractmethod
    def predict_x0(self, xt, t, out):
        """x0_hat [B, ...] from x_t, t and the network's output."""


class Sampling(abc.ABC):
    """A process that opts into sampling (capability SAMPLING): the final sample grid (text samples for tokens),
    FID and KID, the periodic evaluation's samples. Without it those are left out (a note) or refused (--mode=eval's
    FID)."""

    methods: tuple = ()  # the sampling methods `sample` accepts
    default_method: str = ""  # what a config switched to this process samples with (config/schema.switch_part)

    @abc.abstractmethod
    def sample(self, apply_fn, key, shape, method: str, steps: int = 0, constrain=None, clip=True):
        """Samples [shape] by `method` (one of `methods`) with `steps`; constrain(x) shards the batch; clip=True
        clips pixels to [-1, 1] (False for latents)."""

    def uses_steps(self, method: str) -> bool:
        """Whether `method` takes a step count."""
        return True

    def sampling_steps(self, method: str, steps: int) -> int:
        """Network evaluations of one sample (the protocol written next to FID)."""
        return steps

    def guide(self, out_cond, out_uncond, scale):
        """Classifier-free guidance of network outputs: out_uncond + scale (out_cond - out_uncond); scale 1 returns
        out_cond exactly (a Python number short-cuts; a traced one selects it)."""
        if isinstance(scale, (int, float)) and scale == 1:
            return out_cond
        return jnp.where(scale == 1, out_cond, out_uncond + scale * (out_cond - out_uncond))


class Likelihood(abc.ABC):
    """A process that opts into a test likelihood (capability LIKELIHOOD): --mode=eval's bits/dim, the periodic
    evaluation's estimate, and the bound's rows that the learned sampler's bound rewards read. diffusion/
    continuous.py's ODELikelihood is one (the probability-flow ODE's exact likelihood)."""

    exact_likelihood = False  # nll_bpd is the exact likelihood of the probability-flow ODE (flow, EDM), not a bound

    @abc.abstractmethod
    def row_terms(self, apply_fn, x0, t, noise, *, kind: str = "bound"):
        """The bound's term of independent rows (image x0[i] at t[i] with noise[i]): [R] bits/dim (on a chain one
        step's term; in continuous time the ELBO integrand per unit of t, time.cell_share turns it into one grid
        cell's share). kind "bound" or "kl" (training/step.py ROW_KINDS): "kl" is the Gaussian KL at every step, t =
        0 included, where the process has a data-end term of its own (the chain's reference reward); elsewhere the
        same as "bound"."""

    @abc.abstractmethod
    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0):
        """(nll [B] bits/dim, terms or None, prior or None): --mode=eval's test likelihood (a bound with its terms,
        or the ODE's exact one where exact_likelihood); pixels=True for 8-bit pixels."""

    @abc.abstractmethod
    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        """A cheaper estimate of nll_bpd from num_t times or steps (the periodic evaluation): [B] bits/dim."""

    def nll_bpd_strata(self, apply_fn, x0, t_key, key, strata, per_stratum, decoder_draws, *, pixels=True, max_rows=0):
        """(decoder [B, d], parts [B, K, m], exact [B]): a stratified estimate of nll_bpd's bound that carries its
        own standard error (--mode=eval with eval.bound_strata = K > 0; evaluation/bound.py stratified_bound).
        The bound's noise-end term is exact; its data-end term, the decoder (the chain's L_0, VDM's
        reconstruction), is a stratum of its own, d = decoder_draws draws of its noise; the rest, the sum or
        integral over t, is cut into K strata with m = per_stratum independent draws in each: parts[b, k, j] the
        j-th draw's unbiased estimate of stratum k's share of image b's bound, so that exact + mean_j decoder +
        sum_k mean_j parts is unbiased for the bound. t_key draws the times (the same for every batch of images),
        key the noise (each image its own). Only where the bound is a sum or an integral over t: DDPM, VP."""
        raise NotImplementedError(f"the process {self.name!r} has no stratified estimate of its likelihood")

    def strata_protocol(self, strata: int, per_stratum: int, decoder_draws: int) -> dict:
        """How nll_bpd_strata's estimate was computed (written next to it by --mode=eval)."""
        raise NotImplementedError(f"the process {self.name!r} has no stratified estimate of its likelihood")

    @classmethod
    def strata_problem(cls, cfg, num_strata: int):
        """What eval.bound_strata must be, when num_strata cannot be used with this process's config cfg (one
        phrase, "must be ...: why"), or None."""
        if cls.nll_bpd_strata is not Likelihood.nll_bpd_strata:
            return None
        if cls.exact_likelihood:
            return "must be 0 (the full computation): the likelihood is the probability-flow ODE's, not a sum over t"
        return "must be 0 (the full computation): the process has no stratified estimate (nll_bpd_strata)"

    @abc.abstractmethod
    def bound_protocol(self) -> dict:
        """How nll_bpd's number was computed (written next to it by --mode=eval)."""

    @abc.abstractmethod
    def estimate_protocol(self, num_t: int) -> str:
        """What nll_bpd_estimate(num_t) computes (the periodic evaluation's label)."""


def abstract_members(part) -> list:
    """The contract's members a process class leaves abstract (its time_domain among them while it is None): sorted
    names."""
    return sorted(
        set(getattr(part, "__abstractmethods__", ())) | ({"time_domain"} if part.time_domain is None else set())
    )


class ProcessRegistry(Registry):
    """The registry of processes: a part must subclass Process and give every abstract member."""

    def register(self, part):
        if not (inspect.isclass(part) and issubclass(part, Process)):
            raise ValueError(
                f"diffusion process {getattr(part, 'name', part)!r} must subclass diffusion.base.Process (the contract)"
            )
        missing = abstract_members(part)
        if missing:
            raise ValueError(
                f"diffusion process {getattr(part, 'name', part)!r} lacks the contract's {', '.join(missing)} "
                f"(diffusion/base.py Process; docs/extending.md#a-diffusion-process)"
            )
        return super().register(part)


PROCESSES = ProcessRegistry("diffusion", FLAT)


def make_process(diffusion_cfg):
    """The process config.diffusion names, built from its own fields."""
    return PROCESSES[diffusion_cfg.name].from_config(diffusion_cfg)
