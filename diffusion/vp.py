"""Variance-preserving diffusion in continuous time, as VDM (Kingma et al. 2021; google-research/vdm
`model_vdm.py`): t in [0, 1], x_t = alpha_t x0 + sigma_t eps with alpha_t^2 = sigmoid(lambda_t),
sigma_t^2 = sigmoid(-lambda_t), lambda_t = log SNR(t) = -gamma(t) decreasing from logsnr_max at t = 0 to
logsnr_min at t = 1 (config.diffusion, name "vp"). The shared machinery (targets, ODE, samplers, likelihood) is in
continuous.py.

Schedules of lambda (VDM's ends by default: gamma from -13.3 to 5, i.e. lambda from 13.3 to -5):
- linear: VDM's fixed schedule, lambda(t) = logsnr_max + (logsnr_min - logsnr_max) t;
- cosine: alpha_t = cos(pi t' / 2) truncated to the same log-SNR range (simple diffusion's logsnr_schedule_cosine,
  Hoogeboom et al. 2023): lambda(t) = -2 log tan(a + t (b - a)), a = atan(exp(-logsnr_max / 2)),
  b = atan(exp(-logsnr_min / 2)).
- learned: VDM's learned monotone schedule (model_vdm.py NoiseSchedule_NNet): gamma(t) = l1(t) + l3(phi(l2(2 t - 1)))
  / 1024, phi(h) = 2 (sigmoid(h) - 1/2), l1, l2 (1024 features), l3 dense layers with non-negative weights (the
  absolute value of the kernel: gamma increases with t), l1 initialised to the linear schedule (kernel gamma_max -
  gamma_min, bias gamma_min), l2 and l3 to N(0, 0.01^2), so it starts at the linear schedule and its ends move. Its
  parameters are the variables collection "schedule" of the diffusion model's parameters (optimizer, EMA,
  checkpoint and sharding as the network's); `bind(params)` gives the process at given parameters. As in VDM: the
  network sees its normalised gamma, 1000 (gamma(t) - gamma_min) / (gamma_max - gamma_min) with the configured ends,
  not t; the training loss is the ELBO itself (the diffusion term -1/2 lambda'(t) |eps - eps_hat|^2 as the
  per-example "mse", the prior and reconstruction as the extra term, the reconstruction's z_0 with the same eps as
  x_t: each term stays unbiased), so every parameter, the schedule's included, descends the bound, as VDM's public
  code trains it (the paper's variance-minimising update of the schedule's interior is not implemented: with the
  ELBO alone the interior's gradient averages to zero, by the invariance). With train.weight_decay > 0, AdamW
  decays the schedule's parameters too. Samplers that
  invert the schedule (logit-normal, log-normal), the geometric sweep grid and loss weightings other than none are
  refused with it; the bound's diffusion term is stratified in t.

The ELBO in bits/dim (`nll_bpd`; VDM eq. 11-17, per dimension, divided by ln 2):
- prior: KL(q(x_1 | x0) || N(0, I)) = 1/2 mean(alpha_1^2 x0^2 + sigma_1^2 - log sigma_1^2 - 1);
- reconstruction: -log p(x | z_0) with VDM's decoder: z_0 = alpha_0 x0 + sigma_0 eps, rescaled z = z_0 / alpha_0,
  p(x = x_k | z) = softmax_k(-(z - x_k)^2 / (2 sigma_0^2 / alpha_0^2)) independently per dimension over the 256
  values x_k = k / 127.5 - 1 of this project's pixel encoding (VDM's own encoding puts its 256 values at
  2 (k + 1/2) / 256 - 1; we use ours so that the data are exactly the decoder's values);
- diffusion loss: int_0^1 -1/2 lambda'(t) mean (eps - eps_hat)^2 dt, estimated without bias from `bound_points`
  stratified times (one uniform time in each of as many equal cells of [0, 1]), fresh noise per time.
The whole bound is an upper bound on the discrete NLL of 8-bit data. The network's output never enters the prior or
the reconstruction (VDM's decoder uses z_0 only).
"""

import copy
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from config.fields import Choice, FieldError, Int, Num
from config.registry import FIXED_SCHEDULE, INVERTIBLE
from diffusion.base import PROCESSES, Likelihood
from diffusion.continuous import TARGETS, ContinuousProcess, bcast, sigma_to_logsnr_vp
from diffusion.gaussian import LN2, mean_flat

VP_SCHEDULES = ("linear", "cosine", "learned")


class DenseMonotone(nn.Dense):
    """A dense layer with non-negative weights |kernel| (VDM's DenseMonotone): non-decreasing in every input."""

    @nn.compact
    def __call__(self, x):
        kernel = jnp.abs(self.param("kernel", self.kernel_init, (x.shape[-1], self.features)))
        y = x @ kernel
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class NoiseNet(nn.Module):
    """VDM's learned monotone gamma(t) = -log SNR(t) (module docstring): t [N] -> gamma [N]."""

    gamma_min: float
    gamma_max: float
    features: int = 1024

    @nn.compact
    def __call__(self, t):
        t = jnp.reshape(t, (-1, 1)).astype(jnp.float32)
        const = lambda v: lambda key, shape, dtype=jnp.float32: jnp.full(shape, v, dtype)
        h = DenseMonotone(1, kernel_init=const(self.gamma_max - self.gamma_min), bias_init=const(self.gamma_min))(t)
        g = DenseMonotone(self.features, kernel_init=nn.initializers.normal(0.01))(2.0 * (t - 0.5))
        g = 2.0 * (nn.sigmoid(g) - 0.5)
        g = DenseMonotone(1, kernel_init=nn.initializers.normal(0.01), use_bias=False)(g) / self.features
        return (h + g)[:, 0]


@PROCESSES.register
class VP(ContinuousProcess, Likelihood):
    name = "vp"
    FIELDS = dict(
        schedule=Choice("linear", VP_SCHEDULES),
        logsnr_max=Num(13.3, note="(VDM: 13.3) log SNR at t = 0"),
        logsnr_min=Num(-5.0, note="(VDM: -5) log SNR at t = 1"),
        target=Choice("eps", TARGETS),  # VDM: eps
        # the resolution of [0, 1] for grids: the learned sampler's sweep (sweep_stride in units of 1/grid), the
        # bounds of bin and step counts; training times are continuous
        grid=Int(1000, 2),
        bound_points=Int(1000, 1),  # stratified times of the diffusion loss in --mode=eval's bound
        likelihood_steps=Int(100, 1),  # Heun steps of the ODE likelihood (ode_nll_bpd)
    )

    @classmethod
    def check(cls, cfg, ctx):
        if not cfg.logsnr_min < cfg.logsnr_max:
            raise FieldError("logsnr_min", cfg.logsnr_min, f"must be below logsnr_max={cfg.logsnr_max}")

    @classmethod
    def offers(cls, cfg) -> set:
        """The derived offer, by schedule: init_params and bind are there for the learned schedule alone, whose
        inverse is not kept (and which is trained on the ELBO, whose interior gradient needs uniform t)."""
        if cfg.schedule == "learned":
            return super().offers(cfg) - {INVERTIBLE}
        return super().offers(cfg) | {FIXED_SCHEDULE}

    @classmethod
    def lacks(cls, capability: str, cfg) -> tuple:
        if cfg.schedule == "learned" and capability in (INVERTIBLE, FIXED_SCHEDULE):
            return (
                "config.diffusion.schedule='learned'",
                "the learned schedule has no inverse to map noise levels to times",
            )
        return super().lacks(capability, cfg)

    def __init__(self, **fields):
        """VP with its FIELDS' defaults (written there once), any of them given by keyword."""
        f = self.field_values(fields)
        super().__init__(f["target"], f["grid"], likelihood_steps=f["likelihood_steps"])
        schedule = f["schedule"]
        if schedule not in VP_SCHEDULES:
            raise ValueError(f"schedule {schedule!r} is not one of {', '.join(VP_SCHEDULES)}")
        self.schedule_name, self.lo, self.hi = schedule, float(f["logsnr_min"]), float(f["logsnr_max"])
        self.bound_points = int(f["bound_points"])
        self.learned_schedule = schedule == "learned"
        self.noise_net = NoiseNet(-self.hi, -self.lo) if self.learned_schedule else None
        self.schedule_params = None
        self.a = math.atan(math.exp(-self.hi / 2))
        self.b = math.atan(math.exp(-self.lo / 2))

    # -- the learned schedule ------------------------------------------------------------------------------------
    def init_params(self, key, variables):
        """The model's variables with the learned schedule's collection added ("schedule"); others unchanged."""
        if not self.learned_schedule:
            return variables
        return {**variables, "schedule": self.noise_net.init(key, jnp.zeros((1,), jnp.float32))["params"]}

    def bind(self, params):
        """This process with the learned schedule at `params` (the model's variables); itself otherwise."""
        if not self.learned_schedule:
            return self
        bound = copy.copy(self)
        bound.schedule_params = params["schedule"]
        return bound

    def gamma(self, t):
        if self.schedule_params is None:
            raise ValueError("the learned schedule needs its parameters: use process.bind(params)")
        return self.noise_net.apply({"params": self.schedule_params}, t).reshape(jnp.shape(t))

    def net_time(self, t):
        if not self.learned_schedule:
            return super().net_time(t)
        return self.time_scale * (self.gamma(t) + self.hi) / (self.hi - self.lo)  # VDM: the normalised gamma

    def example_losses(self, apply_fn, x0, t, noise):
        """Fixed schedules: (plain MSE of the target, 0). Learned: VDM's ELBO per example, (the diffusion term at t,
        prior + reconstruction) in bits/dim (module docstring)."""
        if not self.learned_schedule:
            return super().example_losses(apply_fn, x0, t, noise)
        xt = self.q_sample(x0, t, noise)
        diff = self.elbo_integrand(xt, t, noise, self.run(apply_fn, xt, t))
        return diff, self.prior_bpd(x0) + self.reconstruction_bpd(x0, noise=noise)

    def logsnr(self, t):
        t = jnp.asarray(t, jnp.float32)
        if self.learned_schedule:
            return -self.gamma(t)
        if self.schedule_name == "linear":
            return self.hi + (self.lo - self.hi) * t
        return -2.0 * jnp.log(jnp.tan(self.a + t * (self.b - self.a)))

    def alpha_sigma(self, t):
        lam = self.logsnr(t)
        return jnp.sqrt(jax.nn.sigmoid(lam)), jnp.sqrt(jax.nn.sigmoid(-lam))

    def t_of_logsnr(self, lam):
        if self.learned_schedule:
            raise ValueError("the learned schedule has no closed-form inverse (validation refuses what needs one)")
        if self.schedule_name == "linear":
            t = (self.hi - lam) / (self.hi - self.lo)
        else:
            t = (jnp.arctan(jnp.exp(-lam / 2)) - self.a) / (self.b - self.a)
        return jnp.clip(t, 0.0, 1.0)

    def t_of_sigma(self, s):
        return self.t_of_logsnr(sigma_to_logsnr_vp(s))

    def bound_protocol(self) -> dict:
        return dict(
            bound=f"VDM's continuous-time ELBO: prior KL + reconstruction (VDM's 256-value decoder of z_0) + diffusion "
            f"loss from {self.bound_points} stratified times, fresh noise per time",
            schedule=f"{self.schedule_name}, log SNR {self.hi} -> {self.lo}",
        )

    def estimate_protocol(self, num_t: int) -> str:
        return (
            f"unbiased estimate of VDM's ELBO, the diffusion loss from {num_t} stratified times "
            f"({'in t' if self.learned_schedule else 'in log SNR'}), prior and reconstruction exact in expectation"
        )

    # -- the ELBO ------------------------------------------------------------------------------------------------
    def prior_bpd(self, x0):
        a, s = self.alpha_sigma(jnp.ones(x0.shape[:1], jnp.float32))
        a2, s2 = bcast(a, x0.ndim) ** 2, bcast(s, x0.ndim) ** 2
        return mean_flat(0.5 * (a2 * x0**2 + s2 - jnp.log(s2) - 1.0)) / LN2

    def reconstruction_bpd(self, x0, key=None, noise=None):
        """-log p(x0 | z_0) in bits/dim, z_0 from `noise`, or drawn from `key`: [B]."""
        a, s = self.alpha_sigma(jnp.zeros(x0.shape[:1], jnp.float32))
        ratio = (s / a).reshape((-1,) + (1,) * (x0.ndim - 1))
        noise = jax.random.normal(key, x0.shape, x0.dtype) if noise is None else noise
        z = x0 + ratio * noise  # z_0 / alpha_0
        values = jnp.arange(256, dtype=jnp.float32) / 127.5 - 1.0
        logits = -0.5 * ((z[..., None] - values) / ratio[..., None]) ** 2
        logp = jax.nn.log_softmax(logits, axis=-1)
        k = jnp.clip(jnp.round((x0 + 1.0) * 127.5), 0, 255).astype(jnp.int32)
        return -mean_flat(jnp.take_along_axis(logp, k[..., None], axis=-1)[..., 0]) / LN2

    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0, num_t: int = 0):
        """(ELBO [B], diffusion loss [B], prior + reconstruction [B]) in bits/dim, the diffusion loss from num_t
        (default bound_points) stratified times."""
        k_diff, k_rec = jax.random.split(key)
        diff = self.diffusion_loss(apply_fn, x0, k_diff, num_t or self.bound_points, max_rows)
        ends = self.prior_bpd(x0) + self.reconstruction_bpd(x0, k_rec)
        return diff + ends, diff, ends

    def nll_bpd_strata(self, apply_fn, x0, t_key, key, strata, per_stratum, decoder_draws, *, pixels=True, max_rows=0):
        """The ELBO's stratified estimate with a standard error (base.Likelihood.nll_bpd_strata): (the reconstruction
        term at decoder_draws draws of z_0 [B, d], parts [B, K, m], the prior KL [B], exact). parts[:, k, j] is the
        diffusion loss's estimate from one uniform position in the k-th of K equal cells, as diffusion_loss's (in log
        SNR where invertible: cell_times), positions from t_key, weight x integrand, each row with its own noise."""
        K, m, B = strata, per_stratum, x0.shape[0]
        u = (jnp.repeat(jnp.arange(K, dtype=jnp.float32), m) + jax.random.uniform(t_key, (K * m,))) / K
        ts, weights = self.cell_times(u, K)
        k_diff, k_rec = jax.random.split(key)
        noise = jax.random.normal(k_diff, (K * m,) + x0.shape, x0.dtype)
        diff = self.bound_terms(apply_fn, x0, ts, noise, max_rows=max_rows) * weights
        rec = jnp.stack([self.reconstruction_bpd(x0, k) for k in jax.random.split(k_rec, decoder_draws)], axis=-1)
        return rec, diff.reshape(B, K, m), self.prior_bpd(x0)

    def strata_protocol(self, strata: int, per_stratum: int, decoder_draws: int) -> dict:
        return dict(
            strata=strata,
            per_stratum=per_stratum,
            decoder_draws=decoder_draws,
            bound=f"unbiased stratified estimate of VDM's continuous-time ELBO: prior KL exact, reconstruction from "
            f"{decoder_draws} draws of z_0, diffusion loss from {strata} equal cells "
            f"({'in t' if self.learned_schedule else 'in log SNR'}) with {per_stratum} uniform times in each (the same "
            "for every image, fresh noise per image)",
            schedule=f"{self.schedule_name}, log SNR {self.hi} -> {self.lo}",
        )

    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        """The ELBO with the diffusion loss from num_t stratified times (unbiased; equal to nll_bpd's with
        num_t = bound_points)."""
        return self.nll_bpd(apply_fn, x0, key, max_rows=max_rows, num_t=num_t)[0]
