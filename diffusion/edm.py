"""EDM (Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based Generative Models"; NVlabs/edm) as a
continuous-time process (config.diffusion, name "edm"), ported from NVlabs/edm's `training/networks.py`
(EDMPrecond), `training/loss.py` (EDMLoss) and `generate.py` (edm_sampler).

The path is variance exploding: x = x0 + sigma eps (alpha = 1), log SNR = -2 ln sigma.

Preconditioning (EDMPrecond, sd = sigma_data = 0.5): the network F sees c_in x and c_noise, the denoiser is
    D(x, sigma) = c_skip x + c_out F(c_in x, c_noise),
    c_skip = sd^2 / (sigma^2 + sd^2),  c_out = sigma sd / sqrt(sigma^2 + sd^2),  c_in = 1 / sqrt(sd^2 + sigma^2),
    c_noise = ln(sigma) / 4.
The network's time input is time_scale * c_noise (`net_time`): 1000 by default, the scale of the project's other
processes (the discrete steps 0..999 and 1000 t, the UNet's sinusoidal embedding written for them), so the network
sees 250 ln sigma; time_scale = 1 gives F exactly EDM's c_noise, which with this UNet's embedding (frequencies
10000^(-i / (half - 1)), sin then cos) is DDPM++'s positional embedding of it (networks.py PositionalEmbedding with
endpoint=True, then SongUNet's sin/cos swap). Where sigma = 0 (t = 0 exactly) c_noise uses the smallest normal
float32 instead of 0, so that the embedding stays finite; nothing else changes there.

The loss (EDMLoss): lambda(sigma) |D - x0|^2 with lambda = (sigma^2 + sd^2) / (sigma sd)^2 = 1 / c_out^2. The
per-example "mse" here is the MSE of F against its effective target (x0 - c_skip x) / c_out, which equals
lambda |D - x0|^2 exactly, so with weighting "none" the loss is EDM's (averaged over dimensions, where EDM sums
them: a constant factor). As a linear target c1 x0 + c2 eps (continuous.py's `target_coefs`, target "edm"):
    c1 = sigma / (sd sqrt(sigma^2 + sd^2)),  c2 = -sd / sqrt(sigma^2 + sd^2),
finite at sigma = 0 (F's target is then -eps) and for sigma -> infinity (x0 / sd). `x0_mse_factor` is lambda, and
continuous.py's `predict` gives back D = c_skip x + c_out F and eps_hat = (x - D) / sigma from the 2x2 system.

Time (for the samplers, weightings and bins; t = 0 data, t = 1 noise): t = sigma / (1 + sigma), i.e.
sigma(t) = t / (1 - t), ln sigma = logit(t), log SNR(t) = 2 log((1 - t) / t) = flow matching's (flow.py), so every
sampler reads the same log-SNR distribution from t on EDM as on a flow, and t in (0, 1) covers every sigma in
(0, inf). Hence:
- `lognormal` draws ln sigma ~ N(P_mean, P_std) and maps it by t_of_logsnr(-2 ln sigma) = sigmoid(ln sigma): no
  clipping, so sigma(t) is EDM's draw (exp(P_mean + P_std n) for the same normal n) up to float32 rounding of t;
- `uniform`: t ~ U(0, 1), sigma = t / (1 - t) (the log-SNR density of rectified flow's uniform t);
- `logitnormal`: n = sigmoid(m + s z) is, as on VP and on the DDPM chain, the noise level of the variance-preserving
  path with the same log SNR, n = sigma / sqrt(1 + sigma^2) (`t_of_sigma`); EDM's own sigma is n / sqrt(1 - n^2);
- the learned sampler (t = u ~ Beta), InfoNoise and the adaptive noise schedule (log-SNR bins over the grid's cell
  midpoints, t_of_logsnr), and EDM2's uncertainty weighting (its Fourier features of -log SNR / 8 = ln(sigma) / 4,
  EDM2's c_noise, applied to this "mse", as EDM2 trains) use logsnr, dlogsnr, t_of_logsnr, x0_mse_factor,
  path_coefs and grid as on the other continuous processes.
t is clipped to at most the largest float32 below 1 before sigma is computed, so that sigma stays finite.

Sampling (`sample`; edm_sampler, EDM's Algorithm 2): N = `steps` noise levels
    sigma_i = (sigma_max^(1/rho) + i / (N - 1) (sigma_min^(1/rho) - sigma_max^(1/rho)))^rho,  i < N,  sigma_N = 0,
x_0 = sigma_max z (the prior N(0, sigma_max^2 I)); at each step the stochastic churn (S_churn, S_min, S_max,
S_noise: `s_churn`, ...) first raises sigma_i to sigma_hat = sigma_i (1 + gamma), gamma = min(S_churn / N, sqrt2 - 1)
where S_min <= sigma_i <= S_max (else 0), adding sqrt(sigma_hat^2 - sigma_i^2) S_noise z, computed as
sigma_i sqrt(gamma (2 + gamma)) S_noise z: exactly 0 where gamma = 0 (compiled, the difference of squares is the
rounding error of sigma_i^2 there, of either sign, and its root NaN); then an Euler step
d = (x - D(x, sigma_hat)) / sigma_hat to sigma_{i+1} and, except in the last step (to sigma_N = 0), Heun's
correction with D at sigma_{i+1}. Default churn 0: the deterministic Heun sampler (Algorithm 1), 2 N - 1
evaluations. Methods: "heun" (that), "euler" (the same levels and churn, no correction: N evaluations), "ancestral"
(the VE reverse chain on the same levels, x_{i+1} ~ q(x_{i+1} | x_i, x0 = D): mean D + (sigma_{i+1} / sigma_i)^2
(x_i - D), variance sigma_{i+1}^2 (1 - (sigma_{i+1} / sigma_i)^2), the last step D itself; no churn). The noise of
step i is normal(fold_in(key, i)). EDM computes in float64, here float32; with clip (pixels) only the result is
clipped (as the other ODE samplers here; ancestral clips D at every step).

Likelihood (`nll_bpd`, --mode=eval's number; EDM's code has none): the exact likelihood of the probability-flow ODE
dx/dsigma = (x - D(x, sigma)) / sigma (continuous.ode_nll_bpd: Heun with `likelihood_steps` steps, Hutchinson's
trace with one Rademacher probe, uniform dequantisation of 8-bit pixels, +7 bits for the [-1, 1] scale), from
sigma = 0 (the data) to sigma_max, where the prior is N(0, sigma_max^2 I) (`prior_logp`). The ODE is integrated in
the scaled variable y = x / (1 + sigma) = (1 - t) x0 + t eps, flow matching's path, on an even grid of
t = t_max tau, t_max = sigma_max / (1 + sigma_max): dy/dt = E[eps | x] - D(x, sigma) is flow matching's velocity,
whose ODE is smooth at both ends, and y = x at sigma = 0; the prior's density is carried to y, log p(y) =
log N((1 + sigma_max) y; 0, sigma_max^2 I) + D ln(1 + sigma_max). Chosen over an even grid in EDM's rho = 7
levels (sigma = sigma_max tau^7, which starts at sigma = 0 too), which needed several times more steps for the same
accuracy on Gaussian data (tests/test_edm.py checks this grid against the closed form). Not a bound: the ELBO
integrand (`elbo_integrand`, the learned sampler's "bound" reward) is continuous.py's, per unit of t.

The contract (diffusion/base.py Process): this class gives alpha_sigma, logsnr, t_of_logsnr, t_of_sigma (VP noise
level), sigma / t_of_edm_sigma (EDM's sigma and back), target_coefs (F's target), precond (c_skip, c_out, c_in,
c_noise), net_time, run (F at c_in x), denoise (D), prior_sample / prior_logp (VE prior), likelihood_ode (in y),
sample (edm_sampler), nll_bpd, nll_bpd_estimate, bound_protocol, estimate_protocol; the rest is ContinuousProcess's.
Capabilities: invertible log SNR, no parameters, no bound (exact_likelihood: the ODE's).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import FieldError, Int, Num
from diffusion.base import PROCESSES
from diffusion.continuous import TIME_SCALE, ContinuousProcess, ODELikelihood, bcast, sigma_to_logsnr_vp
from diffusion.likelihood import standard_normal_logp

T_MAX = float(np.nextafter(np.float32(1.0), np.float32(0.0)))  # the largest float32 below 1
TINY = float(np.finfo(np.float32).tiny)  # c_noise's floor of sigma (t = 0 exactly)


def edm_sigmas(num_steps: int, sigma_min: float, sigma_max: float, rho: float):
    """EDM's time steps (generate.py edm_sampler): num_steps rho-spaced levels from sigma_max down to sigma_min,
    then 0: [num_steps + 1] float32."""
    i = np.arange(num_steps, dtype=np.float64)
    hi, lo = sigma_max ** (1.0 / rho), sigma_min ** (1.0 / rho)
    s = (hi + i / max(num_steps - 1, 1) * (lo - hi)) ** rho
    return jnp.asarray(np.append(s, 0.0), jnp.float32)


def churn_gamma(sigma, num_steps: int, s_churn: float, s_min: float, s_max: float):
    """EDM's gamma_i: min(S_churn / N, sqrt(2) - 1) where S_min <= sigma <= S_max, else 0."""
    g = min(s_churn / num_steps, math.sqrt(2.0) - 1.0)
    return jnp.where((sigma >= s_min) & (sigma <= s_max), g, 0.0)


def edm_sampler(
    denoise,
    x,
    sigmas,
    key,
    *,
    method: str = "heun",
    s_churn: float = 0.0,
    s_min: float = 0.0,
    s_max: float = float("inf"),
    s_noise: float = 1.0,
    constrain=lambda x: x,
):
    """EDM's sampler (module docstring) from x at sigmas[0] through sigmas [N + 1] (the last 0): denoise(x [B, ...],
    sigma [B]) -> D. method "heun" (EDM's Algorithm 2), "euler" or "ancestral"."""
    n = int(sigmas.shape[0]) - 1
    B = x.shape[0]

    def body(x, i):
        s_cur, s_next = sigmas[i], sigmas[i + 1]
        z = jax.random.normal(jax.random.fold_in(key, i), x.shape)
        if method == "ancestral":
            d0 = denoise(x, jnp.full((B,), s_cur))
            r2 = (s_next / s_cur) ** 2
            x_new = d0 + r2 * (x - d0) + jnp.sqrt(s_next**2 * (1.0 - r2)) * z
            return constrain(x_new), None
        gamma = churn_gamma(s_cur, n, s_churn, s_min, s_max)
        s_hat = s_cur * (1.0 + gamma)
        # sqrt(s_hat^2 - s_cur^2) written as s_cur sqrt(gamma (2 + gamma)): exactly 0 where gamma is 0. Compiled, the
        # difference of squares was the rounding error of s_cur^2 there (XLA's fused multiply-add keeps one product
        # unrounded), of either sign: stray noise, and NaN under the root.
        x_hat = constrain(x + s_cur * jnp.sqrt(gamma * (2.0 + gamma)) * s_noise * z)
        d_cur = (x_hat - denoise(x_hat, jnp.full((B,), s_hat))) / s_hat
        x_next = constrain(x_hat + (s_next - s_hat) * d_cur)
        if method == "euler":
            return x_next, None

        def correct(x_next):
            d_prime = (x_next - denoise(x_next, jnp.full((B,), s_next))) / s_next
            return constrain(x_hat + (s_next - s_hat) * (0.5 * d_cur + 0.5 * d_prime))

        return jax.lax.cond(i < n - 1, correct, lambda x_next: x_next, x_next), None

    x, _ = jax.lax.scan(body, x, jnp.arange(n))
    return x


@PROCESSES.register
class EDM(ContinuousProcess, ODELikelihood):
    name = "edm"
    targets = ("edm",)
    FIELDS = dict(
        sigma_data=Num(0.5, 0, lo_open=True, note="(EDM: 0.5)"),
        sigma_min=Num(0.002, 0, lo_open=True, note="(EDM: 0.002) the sampler's smallest nonzero level"),
        sigma_max=Num(80.0, 0, lo_open=True, note="(EDM: 80) where sampling starts; the prior N(0, sigma_max^2 I)"),
        rho=Num(7.0, 0, lo_open=True, mutable=True, note="(EDM: 7) the sampler's level spacing"),
        # the stochastic sampler's churn (EDM's S_churn, S_min, S_max, S_noise); sampling only
        s_churn=Num(0.0, 0, mutable=True, note="(EDM: 0, deterministic)"),
        s_min=Num(0.0, 0, mutable=True, note="(EDM: 0)"),
        s_max=Num(1e6, 0, mutable=True, note="(EDM: inf; any value >= sigma_max has no upper limit)"),
        s_noise=Num(1.0, 0, mutable=True, note="(EDM: 1)"),
        time_scale=Num(TIME_SCALE, 0, lo_open=True, note="the network sees time_scale * c_noise (EDM: 1)"),
        # the resolution of [0, 1] for grids (as config.diffusion.grid of "vp")
        grid=Int(1000, 2),
        likelihood_steps=Int(100, 1),  # Heun steps of the ODE likelihood in --mode=eval
    )

    @classmethod
    def check(cls, cfg, ctx):
        if not cfg.sigma_min < cfg.sigma_max:
            raise FieldError("sigma_min", cfg.sigma_min, f"must be below sigma_max={cfg.sigma_max}")
        if cfg.s_min > cfg.s_max:
            raise FieldError("s_min", cfg.s_min, f"must not exceed s_max={cfg.s_max}")

    def __init__(self, **fields):
        """EDM with its FIELDS' defaults (written there once), any of them given by keyword."""
        f = self.field_values(fields)
        super().__init__("edm", f["grid"], time_scale=f["time_scale"], likelihood_steps=f["likelihood_steps"])
        for k in ("sigma_data", "sigma_min", "sigma_max", "rho", "s_churn", "s_min", "s_max", "s_noise"):
            setattr(self, k, float(f[k]))

    # -- time and the path ---------------------------------------------------------------------------------------
    def sigma(self, t):
        """EDM's sigma at t [B]: t / (1 - t), t clipped to at most T_MAX."""
        t = jnp.clip(jnp.asarray(t, jnp.float32), 0.0, T_MAX)
        return t / (1.0 - t)

    def t_of_edm_sigma(self, sigma):
        """The time of EDM's noise level sigma [B]: sigma / (1 + sigma)."""
        return self.t_of_logsnr(-2.0 * jnp.log(sigma))

    def alpha_sigma(self, t):
        s = self.sigma(t)
        return jnp.ones_like(s), s

    def logsnr(self, t):
        t = jnp.asarray(t, jnp.float32)
        return 2.0 * (jnp.log1p(-t) - jnp.log(t))

    def t_of_logsnr(self, lam):
        return jax.nn.sigmoid(-0.5 * lam)

    def t_of_sigma(self, s):
        """The time whose variance-preserving noise level sigma / sqrt(1 + sigma^2) is s (module docstring)."""
        return self.t_of_logsnr(sigma_to_logsnr_vp(s))

    def target_coefs(self, a, s, da, ds):
        """F's effective target c1 x0 + c2 eps (module docstring)."""
        sd = self.sigma_data
        r = jnp.sqrt(s**2 + sd**2)
        return s / (sd * r), -sd / r

    # -- the network ---------------------------------------------------------------------------------------------
    def precond(self, sigma):
        """EDMPrecond's (c_skip, c_out, c_in, c_noise) at sigma [B]."""
        sd = self.sigma_data
        c_skip = sd**2 / (sigma**2 + sd**2)
        c_out = sigma * sd / jnp.sqrt(sigma**2 + sd**2)
        c_in = 1.0 / jnp.sqrt(sd**2 + sigma**2)
        c_noise = jnp.log(jnp.maximum(sigma, TINY)) / 4.0
        return c_skip, c_out, c_in, c_noise

    def net_time(self, t):
        return self.time_scale * self.precond(self.sigma(t))[3]

    def run_sigma(self, apply_fn, x, sigma):
        """F(c_in x, time_scale c_noise) at EDM's sigma [B]."""
        _, _, c_in, c_noise = self.precond(sigma)
        return apply_fn(bcast(c_in, x.ndim) * x, self.time_scale * c_noise)

    def run(self, apply_fn, xt, t):
        return self.run_sigma(apply_fn, xt, self.sigma(t))

    def denoise(self, apply_fn, x, sigma):
        """EDM's D(x, sigma) = c_skip x + c_out F: [B, ...]."""
        c_skip, c_out, _, _ = self.precond(sigma)
        return bcast(c_skip, x.ndim) * x + bcast(c_out, x.ndim) * self.run_sigma(apply_fn, x, sigma)

    def eps_of(self, x, sigma, out):
        """eps_hat = (x - D) / sigma from F's output, written to stay finite at sigma = 0: [B, ...]."""
        sd = self.sigma_data
        r = jnp.sqrt(sigma**2 + sd**2)
        return bcast(sigma / r**2, x.ndim) * x - bcast(sd / r, x.ndim) * out

    # -- the prior at sigma_max ----------------------------------------------------------------------------------
    def prior_sample(self, key, shape):
        """sigma_max z, z ~ N(0, I): EDM's latents times t_steps[0]."""
        return self.sigma_max * jax.random.normal(key, shape)

    def prior_logp(self, x):
        """log N(x; 0, sigma_max^2 I) [B] in nats."""
        D = math.prod(x.shape[1:])
        return standard_normal_logp(x / self.sigma_max) - D * math.log(self.sigma_max)

    # -- sampling ------------------------------------------------------------------------------------------------
    def sample(self, apply_fn, key, shape, method: str = "heun", steps: int = 0, constrain=None, clip=True):
        """Samples of `shape` by EDM's sampler over `steps` noise levels (module docstring)."""
        constrain = constrain or (lambda x: x)
        if method not in self.methods:
            raise ValueError(f"sampling method {method!r} is not one of {', '.join(self.methods)} for EDM")
        key, k0 = jax.random.split(key)
        x = constrain(self.prior_sample(k0, shape))
        sigmas = edm_sigmas(int(steps), self.sigma_min, self.sigma_max, self.rho)
        denoise = lambda x, s: self.denoise(apply_fn, x, s)
        if method == "ancestral" and clip:
            denoise = lambda x, s: jnp.clip(self.denoise(apply_fn, x, s), -1.0, 1.0)
        x = edm_sampler(
            denoise,
            x,
            sigmas,
            key,
            method=method,
            s_churn=self.s_churn,
            s_min=self.s_min,
            s_max=self.s_max,
            s_noise=self.s_noise,
            constrain=constrain,
        )
        return jnp.clip(x, -1.0, 1.0) if clip else x

    # -- likelihood ----------------------------------------------------------------------------------------------
    def likelihood_ode(self, apply_fn):
        """(field, prior_logp) of the probability-flow ODE in y = x / (1 + sigma) at t = t_max tau (module
        docstring): dy/dtau = t_max (eps_hat - D), the prior's density carried to y."""
        smax = self.sigma_max
        t_max = smax / (1.0 + smax)

        def field(y, tau):
            t = jnp.full(y.shape[:1], t_max * tau, jnp.float32)
            sigma = self.sigma(t)
            x = bcast(1.0 + sigma, y.ndim) * y
            c_skip, c_out, _, _ = self.precond(sigma)
            out = self.run_sigma(apply_fn, x, sigma)
            D = bcast(c_skip, x.ndim) * x + bcast(c_out, x.ndim) * out
            return t_max * (self.eps_of(x, sigma, out) - D)

        def prior_logp(y):
            return self.prior_logp((1.0 + smax) * y) + math.prod(y.shape[1:]) * math.log1p(smax)

        return field, prior_logp

    def bound_protocol(self) -> dict:
        return dict(
            bound=f"exact likelihood of the probability-flow ODE (not a bound): Heun, {self.likelihood_steps} steps "
            f"even in t = sigma / (1 + sigma) from sigma=0 to sigma_max={self.sigma_max} (in y = x / (1 + sigma)), "
            "prior N(0, sigma_max^2 I), Hutchinson trace with one Rademacher probe per image, uniform "
            "dequantisation of 8-bit pixels (an upper bound on the discrete NLL; latents: the continuous density)",
        )

    def estimate_protocol(self, num_t: int) -> str:
        return (
            f"the probability-flow ODE's likelihood with {num_t} Heun steps, one Hutchinson probe per image, uniform "
            "dequantisation (fewer steps than --mode=eval's: cheaper, less accurate)"
        )
