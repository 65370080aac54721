"""What the continuous-time processes share (vp.py: VDM's variance-preserving diffusion; flow.py: flow matching):
a Gaussian path x_t = alpha(t) x0 + sigma(t) eps on t in [0, 1] (t = 0 data, t = 1 noise), the network's target,
the per-example loss, the ELBO integrand (the learned sampler's reward), the probability-flow ODE and its
likelihood, and the samplers (Euler, Heun, ancestral).

Time and the network: t is float32 in [0, 1]; the network sees `time_scale * t` (1000 by default, the scale of the
discrete processes' integer timesteps, so the same time embeddings work; VDM scales its normalised time by 1000 too).

Targets, each a linear combination c1(t) x0 + c2(t) eps (`target_coefs`):
    eps: (0, 1);  x0: (1, 0);  v: (-sigma, alpha) (v = alpha eps - sigma x0, Salimans & Ho 2022);
    velocity: (alpha', sigma') (dx_t/dt; flow matching's eps - x0).
From x_t and an output, x0 and eps follow by solving the 2x2 system [[alpha, sigma], [c1, c2]] (`predict`).

The ELBO integrand (Kingma et al. 2021, VDM eq. 17; Kingma & Gao 2023 for any path): with lambda(t) = log SNR(t) =
log(alpha^2 / sigma^2), the diffusion loss is E_{t ~ U(0,1)} [ -1/2 lambda'(t) ||eps - eps_hat(x_t, t)||^2 ]; per
dimension and in bits (divided by D ln 2) it is `elbo_integrand`, in bits/dim per unit of t. It depends on the path
only through its SNR ends (VDM's invariance), so the same formula reads a flow-matching model as a diffusion model.

The probability-flow ODE of every Gaussian path is dx/dt = alpha'(t) E[x0 | x_t] + sigma'(t) E[eps | x_t]
(the marginal velocity of flow matching; for VP it equals Song et al.'s probability-flow ODE), computed from any
target through `predict`. Sampling integrates it from t = 1 (x_1 ~ the prior, N(0, I)) to t = 0 on an even grid
of `steps` steps: "euler"; "heun" (Heun's second-order method, EDM's Algorithm 1: Euler then the trapezoidal
correction, the last step Euler only, 2 steps - 1 network evaluations); "ancestral": the path's own reverse chain
on the same grid, x_s ~ q(x_s | x_t, x0 = x0_hat) (VDM's sampler, written for any alpha, sigma), no noise in the
last step.
With clip (pixels), "ancestral" clips x0_hat to [-1, 1] at every step; the ODE methods clip only the result.
"""

import abc

import jax
import jax.numpy as jnp
import numpy as np

from config.registry import DISCRETE
from diffusion.base import Gaussian, Likelihood, Process, Sampling
from diffusion.gaussian import LN2, fold_timesteps, mean_flat
from diffusion.likelihood import ode_log_likelihood, standard_normal_logp
from diffusion.time import ContinuousTime

TARGETS = ("eps", "x0", "v", "velocity")
METHODS = ("ancestral", "euler", "heun")
TIME_SCALE = 1000.0


def bcast(a, ndim: int):
    """[B] -> [B, 1, ..., 1] for a rank-`ndim` batch."""
    return a.reshape(a.shape + (1,) * (ndim - a.ndim))


def stratified_times(key, num: int):
    """num times, one uniform draw in each of the num equal cells of [0, 1): t_k = (k + u_k) / num."""
    return (jnp.arange(num, dtype=jnp.float32) + jax.random.uniform(key, (num,))) / num


class ContinuousProcess(Process, Gaussian, Sampling):
    """Base class of the processes in continuous time (the contract is diffusion/base.py's Process). Subclasses give
    `alpha_sigma(t)`, `logsnr(t)`, `t_of_logsnr(lam)` and `t_of_sigma(s)` (jnp, [B] -> [B]; the last two clipped
    into [0, 1]), their likelihood (`nll_bpd`, `nll_bpd_estimate`, `bound_protocol`, `estimate_protocol`) and a
    registered `name`; the prior at t = 1 is N(0, I) (`prior_sample`, `prior_logp`), which a variance-exploding
    process overrides (edm.py)."""

    time_domain = ContinuousTime  # t in [0, 1] with `grid` cells
    learned_schedule = False
    vb_scale = 0.0
    methods = METHODS
    default_method = "heun"  # what a config switched to this process samples with (training/schema.switch_part)

    @classmethod
    def lacks(cls, capability: str, cfg) -> tuple:
        """(where, why) of a refusal: the process named as a config phrase, and why it lacks `capability`."""
        if capability == DISCRETE:
            return f"the continuous-time process {cfg.name!r}", "it is defined on discrete timesteps"
        return f"the continuous-time process {cfg.name!r}", f"it offers no {capability}"

    targets = TARGETS

    def __init__(self, target: str, grid: int, *, time_scale: float = TIME_SCALE, likelihood_steps: int = 100):
        if target not in self.targets:
            raise ValueError(f"target {target!r} is not one of {', '.join(self.targets)}")
        self.target, self.grid = target, int(grid)
        self.time_scale = float(time_scale)
        self.likelihood_steps = int(likelihood_steps)

    # -- the path ------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def alpha_sigma(self, t):
        """(alpha, sigma) at t [B]: x_t = alpha x0 + sigma eps, each float32 [B]."""

    def coefs(self, t):
        """(alpha, sigma, alpha', sigma') at t [B], the derivatives by forward-mode differentiation."""
        t = jnp.asarray(t, jnp.float32)
        (a, s), (da, ds) = jax.jvp(self.alpha_sigma, (t,), (jnp.ones_like(t),))
        return a, s, da, ds

    def dlogsnr(self, t):
        """lambda'(t) (negative: the SNR falls with t)."""
        t = jnp.asarray(t, jnp.float32)
        return jax.jvp(self.logsnr, (t,), (jnp.ones_like(t),))[1]

    def target_coefs(self, a, s, da, ds):
        """(c1, c2) of the target c1 x0 + c2 eps."""
        if self.target == "eps":
            return jnp.zeros_like(a), jnp.ones_like(a)
        if self.target == "x0":
            return jnp.ones_like(a), jnp.zeros_like(a)
        if self.target == "v":
            return -s, a
        return da, ds

    def path_coefs(self, t):
        """(alpha, sigma, c1, c2) at t: what the loss weightings need (weightings/base.py)."""
        a, s, da, ds = self.coefs(t)
        return (a, s) + self.target_coefs(a, s, da, ds)

    def x0_mse_factor(self, t):
        """F(t) [B]: the target's MSE is F times the x0-MSE at the same x_t, (c1 sigma - c2 alpha)^2 / sigma^2
        (weightings/base.py; eps: SNR, velocity: 1 / t^2 for flow matching)."""
        a, s, c1, c2 = self.path_coefs(t)
        return (c1 * s - c2 * a) ** 2 / s**2

    def split_out(self, out, channels: int):
        return out, None

    # -- the prior at t = 1 ----------------------------------------------------------------------------------------
    def prior_sample(self, key, shape):
        """A draw of the prior, N(0, I): [shape] float32 (where sampling starts)."""
        return jax.random.normal(key, shape)

    def prior_logp(self, x):
        """log N(x; 0, I) [B] in nats (where the ODE likelihood ends)."""
        return standard_normal_logp(x)

    # -- the network ---------------------------------------------------------------------------------------------
    def net_time(self, t):
        """What the network sees for time t."""
        return self.time_scale * t

    def net_out(self, out):
        """The network's output in this process's convention (flow.py flips it for a reversed time direction)."""
        return out

    def run(self, apply_fn, xt, t):
        return self.net_out(apply_fn(xt, self.net_time(t)))

    # -- forward process and training ----------------------------------------------------------------------------
    def q_sample(self, x0, t, noise):
        a, s = self.alpha_sigma(t)
        return bcast(a, x0.ndim) * x0 + bcast(s, x0.ndim) * noise

    def training_target(self, x0, t, noise):
        a, s, da, ds = self.coefs(t)
        c1, c2 = self.target_coefs(a, s, da, ds)
        return bcast(c1, x0.ndim) * x0 + bcast(c2, x0.ndim) * noise

    def example_mse(self, apply_fn, x0, t, noise):
        """Per-example MSE of the network's output against the target at x_t: [B]. apply_fn(xt, net time)."""
        xt = self.q_sample(x0, t, noise)
        return mean_flat((self.run(apply_fn, xt, t) - self.training_target(x0, t, noise)) ** 2)

    def example_losses(self, apply_fn, x0, t, noise):
        """(mse [B], extra [B] = 0): the train step's per-example terms (no learned variance in continuous time)."""
        mse = self.example_mse(apply_fn, x0, t, noise)
        return mse, jnp.zeros_like(mse)

    def predict(self, xt, t, out):
        """(x0_hat, eps_hat) from x_t and the output (in this process's convention) at t."""
        a, s, da, ds = self.coefs(t)
        c1, c2 = self.target_coefs(a, s, da, ds)
        a, s, c1, c2 = (bcast(v, xt.ndim) for v in (a, s, c1, c2))
        det = a * c2 - s * c1
        return (c2 * xt - s * out) / det, (a * out - c1 * xt) / det

    def predict_x0(self, xt, t, out):
        return self.predict(xt, t, out)[0]

    def velocity(self, xt, t, out):
        """dx/dt of the probability-flow ODE: alpha' x0_hat + sigma' eps_hat."""
        _, _, da, ds = self.coefs(t)
        x0_hat, eps_hat = self.predict(xt, t, out)
        return bcast(da, xt.ndim) * x0_hat + bcast(ds, xt.ndim) * eps_hat

    # -- the ELBO integrand (the learned sampler's reward, the diffusion loss) -----------------------------------
    def elbo_integrand(self, xt, t, noise, out):
        """-1/2 lambda'(t) mean_flat (eps - eps_hat)^2 / ln 2: bits/dim per unit of t, [B]."""
        eps_hat = self.predict(xt, t, out)[1]
        return -0.5 * self.dlogsnr(t) * mean_flat((noise - eps_hat) ** 2) / LN2

    def row_terms(self, apply_fn, x0, t, noise, *, kind: str = "bound"):
        """The ELBO integrand of independent rows (image x0[i], time t[i], noise[i]): [R] bits/dim per unit t, for
        either kind (in continuous time the data end is no term of the integrand)."""
        xt = self.q_sample(x0, t, noise)
        return self.elbo_integrand(xt, t, noise, self.run(apply_fn, xt, t))

    def bound_terms(self, apply_fn, x0, ts, noise, *, max_rows: int = 0):
        """row_terms for many times at once: x0 [B, ...], ts [K], noise [K, B, ...] -> [B, K]."""
        return fold_timesteps(lambda a, b, c: self.row_terms(apply_fn, a, b, c), x0, ts, noise, max_rows)

    def diffusion_loss(self, apply_fn, x0, key, num_t: int, max_rows: int = 0):
        """Unbiased estimate of the diffusion loss int_0^1 integrand dt = 1/2 int E|eps - eps_hat|^2 dlambda over
        [lambda(1), lambda(0)] (finite ends: VP), stratified in log SNR: one uniform lambda in each of num_t equal
        cells, t = t_of_logsnr(lambda), each term weighted by (lambda(0) - lambda(1)) / (-lambda'(t) num_t); fresh
        noise per time: [B] bits/dim. By VDM's invariance the estimator is the same for every schedule with these
        ends (for the linear schedule it is stratification in t); stratifying in t instead would put one time in
        the first 1/num_t of a cosine schedule, where most of the loss is."""
        k_t, k_noise = jax.random.split(key)
        ts, weights = self.cell_times(stratified_times(k_t, num_t), num_t)
        noise = jax.random.normal(k_noise, (num_t,) + x0.shape, x0.dtype)
        return (self.bound_terms(apply_fn, x0, ts, noise, max_rows=max_rows) * weights).sum(axis=1)

    def cell_times(self, u, num_cells: int):
        """(ts, weights) [N] of the diffusion loss's stratified estimate, from positions u [N] in [0, 1) that fall
        in num_cells equal cells: in log SNR where the process is invertible, t = t_of_logsnr(lambda(0) +
        (lambda(1) - lambda(0)) u), weight (lambda(0) - lambda(1)) / (-lambda'(t) num_cells) (the integral over t
        written over lambda); else (a learned schedule) t = u, weight 1 / num_cells. One u per cell: sum weights x
        integrand is unbiased for the diffusion loss (diffusion_loss)."""
        if not self.learned_schedule:
            hi, lo = self.logsnr(jnp.asarray([0.0, 1.0], jnp.float32))
            ts = self.t_of_logsnr(hi + (lo - hi) * u)
            return ts, (hi - lo) / (-self.dlogsnr(ts) * num_cells)
        return u, jnp.full(u.shape, 1.0 / num_cells, jnp.float32)

    # -- likelihood through the probability-flow ODE -------------------------------------------------------------
    def likelihood_ode(self, apply_fn):
        """(field(y [B, ...], tau) -> dy/dtau [B, ...], prior_logp(y) -> [B]): the probability-flow ODE in the
        likelihood's variables, tau a scalar in [t_min, 1] and y = x at tau = 0, and the density of y at tau = 1;
        here tau = t, y = x_t, the field is `velocity` and the prior `prior_logp`."""

        def field(xt, t):
            tb = jnp.full(xt.shape[:1], t, jnp.float32)
            return self.velocity(xt, tb, self.run(apply_fn, xt, tb))

        return field, self.prior_logp

    def ode_nll_bpd(self, apply_fn, x0, key, *, steps: int = 0, dequantize: bool = True, t_min: float = 0.0):
        """-log p(x0) in bits/dim through the probability-flow ODE (diffusion/likelihood.py): Heun's method with
        `steps` (default likelihood_steps) even steps from t_min to 1, Hutchinson's trace estimator with one
        Rademacher probe per image, the prior at t = 1 (likelihood_ode). dequantize (8-bit pixels): uniform
        dequantisation, y = (k + u) / 256 for the pixel value k, x = 2 y - 1, and bits/dim = -log2 p(x) / D + 7
        (score_sde's offset: 8 bits per 256-level bin, minus 1 for the density's scale of 2 from [0, 1] to
        [-1, 1]); the result bounds the discrete NLL from above. Without, the continuous density of x0 itself
        (latents). [B]."""
        k_deq, k_probe = jax.random.split(key)
        x = x0
        if dequantize:
            k = jnp.round((x0 + 1.0) * 127.5)
            x = 2.0 * (k + jax.random.uniform(k_deq, x0.shape)) / 256.0 - 1.0

        field, prior_logp = self.likelihood_ode(apply_fn)
        logp = ode_log_likelihood(field, x, k_probe, steps or self.likelihood_steps, t0=t_min, prior_logp=prior_logp)
        D = np.prod(x0.shape[1:])
        bpd = -logp / (D * LN2)
        return bpd + 7.0 if dequantize else bpd

    # -- sampling ------------------------------------------------------------------------------------------------
    def sample(self, apply_fn, key, shape, method: str = "heun", steps: int = 0, constrain=None, clip=True):
        """Samples of `shape` by `method` over `steps` even steps from t = 1 to 0 (see the module docstring)."""
        constrain = constrain or (lambda x: x)
        if method not in METHODS:
            raise ValueError(f"sampling method {method!r} is not one of {', '.join(METHODS)} in continuous time")
        n = int(steps)
        ts = jnp.linspace(1.0, 0.0, n + 1, dtype=jnp.float32)
        key, k0 = jax.random.split(key)
        x = constrain(self.prior_sample(k0, shape))
        B = shape[0]

        def out_at(x, t):
            tb = jnp.full((B,), t, jnp.float32)
            return tb, self.run(apply_fn, x, tb)

        def ode_body(x, i):
            t, s = ts[i], ts[i + 1]
            tb, out = out_at(x, t)
            d = self.velocity(x, tb, out)
            x_e = constrain(x + (s - t) * d)
            if method == "euler":
                return x_e, None

            def correct(x_e):
                sb, out2 = out_at(x_e, s)
                return constrain(x + (s - t) * 0.5 * (d + self.velocity(x_e, sb, out2)))

            return jax.lax.cond(i < n - 1, correct, lambda x_e: x_e, x_e), None

        def ancestral_body(x, i):
            t, s = ts[i], ts[i + 1]
            tb, out = out_at(x, t)
            x0_hat = self.predict_x0(x, tb, out)
            x0_hat = jnp.clip(x0_hat, -1.0, 1.0) if clip else x0_hat
            a_t, s_t = self.alpha_sigma(tb[:1])
            a_s, s_s = self.alpha_sigma(jnp.full((1,), s, jnp.float32))
            a_ts = a_t / a_s
            var_ts = s_t**2 - a_ts**2 * s_s**2
            mean = (a_ts * s_s**2 / s_t**2)[0] * x + (a_s * var_ts / s_t**2)[0] * x0_hat
            std = jnp.sqrt(jnp.maximum(var_ts * s_s**2 / s_t**2, 0.0))[0]
            z = constrain(jax.random.normal(jax.random.fold_in(key, i), shape))
            last = (i == n - 1).astype(x.dtype)
            return constrain(mean + (1.0 - last) * std * z), None

        body = ancestral_body if method == "ancestral" else ode_body
        x, _ = jax.lax.scan(body, x, jnp.arange(n))
        return jnp.clip(x, -1.0, 1.0) if clip else x

    def sampling_steps(self, method: str, steps: int) -> int:
        """Network evaluations of one sample."""
        return 2 * steps - 1 if method == "heun" else steps


def sigma_to_logsnr_vp(s):
    """log SNR of a variance-preserving path with noise coefficient s: log((1 - s^2) / s^2)."""
    return jnp.log1p(-(s**2)) - 2.0 * jnp.log(s)


__all__ = ["ContinuousProcess", "TARGETS", "METHODS", "TIME_SCALE", "stratified_times", "sigma_to_logsnr_vp"]


class ODELikelihood(Likelihood):
    """For a process whose --mode=eval number is the exact probability-flow ODE likelihood (flow.py, edm.py): put
    after ContinuousProcess in its bases. Its protocols describe the ODE from t = 0 to 1 (EDM's says more)."""

    exact_likelihood = True

    def bound_protocol(self) -> dict:
        return dict(
            bound=f"exact likelihood of the probability-flow ODE (not a bound): Heun, {self.likelihood_steps} steps "
            "from t=0 to 1, Hutchinson trace with one Rademacher probe per image, uniform dequantisation of 8-bit "
            "pixels (an upper bound on the discrete NLL; latents: the continuous density)",
        )

    def estimate_protocol(self, num_t: int) -> str:
        return (
            f"the probability-flow ODE's likelihood with {num_t} Heun steps, one Hutchinson probe per image, uniform "
            "dequantisation (fewer steps than --mode=eval's: a cheaper, less accurate number)"
        )

    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0, num_t: int = 0):
        """(-log p(x0) [B] in bits/dim through the ODE, None, None); pixels=True dequantises."""
        return self.ode_nll_bpd(apply_fn, x0, key, steps=num_t, dequantize=pixels), None, None

    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        """The ODE likelihood with num_t Heun steps (cheaper, less accurate; the same key gives the same
        dequantisation and probes)."""
        return self.nll_bpd(apply_fn, x0, key, pixels=pixels, num_t=num_t)[0]
