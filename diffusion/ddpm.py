"""The discrete-time Gaussian diffusion of DDPM (Ho et al. 2020) as one process object: a noise schedule, the
network's prediction target and the reverse-process variance, with everything the train step, the timestep samplers
and evaluation ask of a process. It knows nothing of the config's layout (config.diffusion, name "ddpm").

Time domain: integer timesteps t = 0..T-1 (`num_timesteps`), drawn by the timestep samplers.
Formulas follow openai/improved-diffusion (`gaussian_diffusion.py`); docs/method.md#the-variational-bound.
Images are in [-1, 1] with shape [B, H, W, C], timesteps are int32 [B].

Choices written down:
- `clip_x0` clips the predicted x0 to [-1, 1], the data's range, before forming the model mean (improved-diffusion's
  clip_denoised). Training-time terms (the learned sampler's reward) use False, the evaluation NLL of pixels True.
- The bound's terms: the Gaussian KL for t > 0, the discretised decoder NLL for t = 0, and the prior KL at T - 1
  (`nll_bpd`); the learned sampler's reward uses the Gaussian KL at every t, t = 0 included (`row_terms(kind="kl")`).

Learned variance (variance="learned_range"; Nichol & Dhariwal 2021, improved-diffusion ModelVarType.LEARNED_RANGE,
as DiT trains): the network outputs 2C channels (`out_channels`), channels-last. The first C are the mean
parametrisation (`target`), the last C the raw v (improved-diffusion's `model_var_values`, nominally in [-1, 1], not
clipped), and log sigma^2 = frac log beta_t + (1 - frac) log beta~_t (clipped), frac = (v + 1) / 2. Every method
taking the network output `out` accepts it: the mean part gives the mean, v the variance; DDIM uses the mean part only.
The variance is trained by the hybrid loss L_simple + lambda L_vlb (`example_losses`, `vb_weight` = lambda).
"""

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import Choice, FieldError, Int, Num
from diffusion import sampling
from diffusion.base import PROCESSES, Gaussian, Likelihood, Process, Sampling
from diffusion.continuous import sigma_to_logsnr_vp
from diffusion.gaussian import (
    LN2,
    discretized_gaussian_log_likelihood,
    extract,
    fold_timesteps,
    learned_range_log_variance,
    mean_flat,
    normal_kl,
    strata_timesteps,
    stratified_timesteps,
)
from diffusion.likelihood import standard_normal_logp
from diffusion.schedules import SCHEDULES, Schedule, betas_for, make_schedule
from diffusion.time import DiscreteTime

TARGETS = ("eps", "x0", "v")
VARIANCES = ("fixed_large", "fixed_small", "learned_range")
VB_WEIGHT = 0.001  # lambda of L_hybrid = L_simple + lambda L_vlb: improved-diffusion (RESCALED_MSE) and DiT


@PROCESSES.register
class DDPM(Process, Gaussian, Sampling, Likelihood):
    name = "ddpm"
    time_domain = DiscreteTime  # steps 0..T-1
    time_field = "num_timesteps"
    FIELDS = dict(
        schedule=Choice("linear", SCHEDULES),
        num_timesteps=Int(1000, 2),
        target=Choice("eps", TARGETS),  # what the network predicts
        variance=Choice("fixed_large", VARIANCES),  # of the reverse process
        # lambda of the hybrid loss; used only with variance=learned_range (example_losses says the convention)
        vb_weight=Num(VB_WEIGHT, lo=0, note="improved-diffusion / DiT: 0.001"),
    )

    @classmethod
    def check(cls, cfg, ctx):
        betas = betas_for(cfg.schedule, cfg.num_timesteps)
        if betas.max() >= 1.0:
            raise FieldError(
                "num_timesteps",
                cfg.num_timesteps,
                f"the {cfg.schedule} schedule's betas, scaled by 1000/T, reach {betas.max():.3g}: use "
                f"T > 20 or the cosine schedule",
            )

    SCHEDULE_FIELDS = ("schedule", "num_timesteps")  # what the Schedule object carries

    @classmethod
    def from_config(cls, cfg) -> "DDPM":
        own = {k: cfg[k] for k in cls.FIELDS if k not in cls.SCHEDULE_FIELDS and k in cfg}
        return cls(make_schedule(cfg.schedule, cfg.num_timesteps), **own)

    def __init__(self, schedule: Schedule, **fields):
        """The chain of `schedule` with the other FIELDS' defaults (written there once: target, variance, vb_weight),
        any of them given by keyword."""
        clash = sorted(set(fields) & set(self.SCHEDULE_FIELDS))
        if clash:
            raise TypeError(f"DDPM takes {', '.join(clash)} from its Schedule (make_schedule), not as a field")
        f = self.field_values(fields)
        target, variance = f["target"], f["variance"]
        if target not in TARGETS:
            raise ValueError(f"target {target!r} is not one of {', '.join(TARGETS)}")
        if variance not in VARIANCES:
            raise ValueError(f"variance {variance!r} is not one of {', '.join(VARIANCES)}")
        self.schedule, self.target, self.variance = schedule, target, variance
        self.vb_weight = float(f["vb_weight"])
        with np.errstate(divide="ignore"):
            sig = np.sqrt((1.0 - self.alphas_cumprod_np()) / self.alphas_cumprod_np())  # EDM's sigma of each step
            # the T - 1 midpoints between consecutive sigmas (increasing in t), in log: t_of_logsnr's cells
            self._log_sigma_edges = jnp.asarray(np.log(0.5 * (sig[1:] + sig[:-1])), jnp.float32)
        self._logsnr = jnp.asarray(self.logsnr_np(), jnp.float32)

    @property
    def learned_variance(self) -> bool:
        return self.variance == "learned_range"

    def out_channels(self, channels: int) -> int:
        """Channels of the network output for images of `channels` channels: 2C with a learned variance, else C."""
        return 2 * channels if self.learned_variance else channels

    def split_out(self, out, channels: int):
        """(mean part [..., C], v [..., C]) of the network output; (out itself, None) for a fixed variance."""
        if not self.learned_variance:
            return out, None
        if out.shape[-1] != 2 * channels:
            raise ValueError(
                f"variance=learned_range needs a network output of 2C = {2 * channels} channels, got {out.shape[-1]} "
                f"(build the model with process.out_channels(C))"
            )
        return out[..., :channels], out[..., channels:]

    @property
    def vb_scale(self) -> float:
        """The factor example_losses applies to L_t (bits/dim): vb_weight * T with a learned variance, else 0."""
        return self.vb_weight * self.num_timesteps if self.learned_variance else 0.0

    @property
    def num_timesteps(self) -> int:
        return self.schedule.num_timesteps

    def logsnr_np(self) -> np.ndarray:
        """log SNR of every step, log(alpha_bar / (1 - alpha_bar)): [T] float64 (-inf at a zero-terminal step)."""
        ab = self.schedule.np64["alphas_cumprod"]
        with np.errstate(divide="ignore"):
            return np.log(ab) - np.log1p(-ab)

    def alphas_cumprod_np(self) -> np.ndarray:
        """alpha_bar of every step, the signal's variance in x_t: [T] float64."""
        return self.schedule.np64["alphas_cumprod"]

    def snr_np(self) -> np.ndarray:
        """SNR of every step, alpha_bar / (1 - alpha_bar): [T] float64 (inf where alpha_bar = 1)."""
        ab = self.alphas_cumprod_np()
        with np.errstate(divide="ignore"):
            return ab / (1.0 - ab)

    def noise_levels_np(self) -> np.ndarray:
        """The noise coefficient of every step, sqrt(1 - alpha_bar): [T] float64."""
        return self.schedule.np64["sqrt_one_minus_alphas_cumprod"]

    def logsnr(self, t):
        """log SNR of steps t [B]: float32 [B] (-inf at a zero-terminal step), from the float64 table."""
        return self._logsnr[t]

    def t_of_logsnr(self, lam):
        """The step whose EDM sigma = sqrt((1 - alpha_bar) / alpha_bar) is nearest to exp(-lam / 2), nearest by
        |sigma - sigma_t| in sigma itself (docs/method.md#log-normal-edm): [B] int32; a sigma beyond the chain's
        largest lands on the last step, one below its smallest on step 0."""
        return jnp.searchsorted(self._log_sigma_edges, -0.5 * lam, side="left").astype(jnp.int32)

    def t_of_sigma(self, n):
        """The step of the variance-preserving noise level n [B] (t_of_logsnr of its log SNR): [B] int32."""
        return self.t_of_logsnr(sigma_to_logsnr_vp(n))

    def path_coefs(self, t):
        """(alpha, sigma, c1, c2) at steps t [B]: sqrt(alpha_bar), sqrt(1 - alpha_bar) and the target's c1 x0 + c2
        eps (eps: (0, 1); x0: (1, 0); v: (-sigma, alpha))."""
        a, s = self.schedule.sqrt_alphas_cumprod[t], self.schedule.sqrt_one_minus_alphas_cumprod[t]
        one, zero = jnp.ones_like(a), jnp.zeros_like(a)
        return (a, s) + {"eps": (zero, one), "x0": (one, zero), "v": (-s, a)}[self.target]

    def x0_mse_factor(self, t):
        """F(t) [B] float32: the target's MSE is F times the x0-MSE at the same x_t (eps: SNR; x0: 1; v: SNR + 1;
        weightings/base.py)."""
        snr = self.schedule.alphas_cumprod[t] / (1.0 - self.schedule.alphas_cumprod[t])
        return {"eps": snr, "x0": jnp.ones_like(snr), "v": snr + 1.0}[self.target]

    def _at(self, table, t, ndim):
        return extract(table, t, ndim)

    # -- forward process and training --------------------------------------------------------------------------
    def q_sample(self, x0, t, noise):
        """x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps."""
        s, n = self.schedule, x0.ndim
        return self._at(s.sqrt_alphas_cumprod, t, n) * x0 + self._at(s.sqrt_one_minus_alphas_cumprod, t, n) * noise

    def q_mean_variance(self, x0, t):
        """Mean, variance, log-variance of q(x_t | x0)."""
        s = self.schedule
        mean = self._at(s.sqrt_alphas_cumprod, t, x0.ndim) * x0
        var = self._at(s.one_minus_alphas_cumprod, t, x0.ndim)
        return mean, var, self._at(s.log_one_minus_alphas_cumprod, t, x0.ndim)

    def training_target(self, x0, t, noise):
        """What the network regresses: eps, x0, or v = sqrt(ab) eps - sqrt(1 - ab) x0."""
        s = self.schedule
        if self.target == "eps":
            return noise
        if self.target == "x0":
            return x0
        return (
            self._at(s.sqrt_alphas_cumprod, t, x0.ndim) * noise
            - self._at(s.sqrt_one_minus_alphas_cumprod, t, x0.ndim) * x0
        )

    def example_mse(self, apply_fn, x0, t, noise):
        """Per-example MSE of the network's output (its mean part) against the training target at x_t: [B].
        apply_fn(xt, t)."""
        xt = self.q_sample(x0, t, noise)
        out, _ = self.split_out(apply_fn(xt, t), x0.shape[-1])
        return mean_flat((out - self.training_target(x0, t, noise)) ** 2)

    def example_losses(self, apply_fn, x0, t, noise):
        """(mse [B], vb [B]) from ONE call of apply_fn(xt, t): the hybrid loss's two per-example terms.

        mse: as example_mse (the mean part against the target; no gradient reaches the variance channels).
        vb: already scaled, ready to add: vb = vb_weight * T * L_t(x0, t), where L_t is the bound term of
        vb_terms_bpd (bits/dim: mean over dimensions / ln 2; the Gaussian KL for t > 0, the decoder NLL for t = 0;
        clip_x0=False), computed with the mean part under stop_gradient, so vb trains only the variance
        channels. This is improved-diffusion's RESCALED_MSE (`terms["vb"] *= num_timesteps / 1000.0`, as DiT
        trains): L_hybrid = L_simple + lambda L_vlb with L_vlb = sum_t L_t estimated by T L_t, lambda = vb_weight
        = 0.001. The caller forms loss = mean(w_sampler * (w(t) * mse + vb)) and adds no factor of its own;
        vb / process.vb_scale is L_t in bits/dim for logging. With a fixed variance vb is zeros and mse is
        bit-for-bit example_mse.
        """
        xt = self.q_sample(x0, t, noise)
        out, v = self.split_out(apply_fn(xt, t), x0.shape[-1])
        mse = mean_flat((out - self.training_target(x0, t, noise)) ** 2)
        if v is None:
            return mse, jnp.zeros_like(mse)
        frozen = jnp.concatenate([jax.lax.stop_gradient(out), v], axis=-1)
        vb = self.vb_terms_bpd(x0, xt, t, frozen, clip_x0=False)
        return mse, self.vb_scale * vb

    # -- reverse process ---------------------------------------------------------------------------------------
    def q_posterior(self, x0, xt, t):
        """Mean, variance and clipped log-variance of q(x_{t-1} | x_t, x0)."""
        s = self.schedule
        mean = self._at(s.posterior_mean_coef1, t, xt.ndim) * x0 + self._at(s.posterior_mean_coef2, t, xt.ndim) * xt
        return mean, self._at(s.posterior_variance, t, xt.ndim), self._at(s.posterior_log_variance_clipped, t, xt.ndim)

    def predict_x0(self, xt, t, out):
        """x0 from the network output (its mean part when the variance is learned)."""
        return self._predict_x0(xt, t, self.split_out(out, xt.shape[-1])[0])

    def _predict_x0(self, xt, t, out):
        s = self.schedule
        if self.target == "eps":
            return (
                self._at(s.sqrt_recip_alphas_cumprod, t, xt.ndim) * xt
                - self._at(s.sqrt_recipm1_alphas_cumprod, t, xt.ndim) * out
            )
        if self.target == "x0":
            return out
        return (
            self._at(s.sqrt_alphas_cumprod, t, xt.ndim) * xt
            - self._at(s.sqrt_one_minus_alphas_cumprod, t, xt.ndim) * out
        )

    def predict_eps(self, xt, t, x0_hat):
        s = self.schedule
        return (self._at(s.sqrt_recip_alphas_cumprod, t, xt.ndim) * xt - x0_hat) / self._at(
            s.sqrt_recipm1_alphas_cumprod, t, xt.ndim
        )

    def model_log_variance(self, t, ndim: int, v=None):
        """Fixed-large: beta_t with beta~_1 at t = 0. Fixed-small: beta~_t, log clipped at t = 0. [B, 1, ..., 1].
        Learned range: v [B, ..., C] (the output's variance channels) between log beta~_t clipped (v = -1) and
        log beta_t (v = +1; beta_0 itself at t = 0, as improved-diffusion) -> [B, ..., C]."""
        s = self.schedule
        if self.learned_variance:
            if v is None:
                raise ValueError("variance=learned_range: the log-variance needs the output's variance channels v")
            # log beta from the float64 table, as improved-diffusion's np.log(self.betas)
            max_log = self._at(jnp.asarray(np.log(s.np64["betas"]), jnp.float32), t, ndim)
            return learned_range_log_variance(v, self._at(s.posterior_log_variance_clipped, t, ndim), max_log)
        if self.variance == "fixed_large":
            table = jnp.log(jnp.concatenate([s.posterior_variance[1:2], s.betas[1:]]))
        else:
            table = s.posterior_log_variance_clipped
        return self._at(table, t, ndim)

    def p_mean_variance(self, xt, t, out, clip_x0: bool):
        """Mean and log-variance of p_theta(x_{t-1} | x_t) given the network output `out`; also x0_hat.
        The log-variance is [B, 1, ..., 1] for a fixed variance, [B, ..., C] for a learned one."""
        out, v = self.split_out(out, xt.shape[-1])
        x0_hat = self._predict_x0(xt, t, out)
        x0_hat = jnp.clip(x0_hat, -1.0, 1.0) if clip_x0 else x0_hat
        mean, _, _ = self.q_posterior(x0_hat, xt, t)
        return mean, self.model_log_variance(t, xt.ndim, v), x0_hat

    # -- the variational bound, in bits/dim --------------------------------------------------------------------
    def vb_terms_bpd(self, x0, xt, t, out, clip_x0: bool = False):
        """Per-example bound term L_t in bits/dim, shape [B]: the Gaussian KL for t > 0, the decoder NLL for t = 0."""
        true_mean, _, true_logvar = self.q_posterior(x0, xt, t)
        mean, logvar, _ = self.p_mean_variance(xt, t, out, clip_x0)
        kl = mean_flat(normal_kl(true_mean, true_logvar, mean, logvar)) / LN2
        nll = -mean_flat(discretized_gaussian_log_likelihood(x0, mean, 0.5 * logvar)) / LN2
        return jnp.where(t == 0, nll, kl)

    def kl_terms_bpd(self, x0, xt, t, out, clip_x0: bool = False):
        """The Gaussian KL in bits/dim at every t, t = 0 included (the learned sampler's reward,
        docs/method.md#reward)."""
        true_mean, _, true_logvar = self.q_posterior(x0, xt, t)
        mean, logvar, _ = self.p_mean_variance(xt, t, out, clip_x0)
        return mean_flat(normal_kl(true_mean, true_logvar, mean, logvar)) / LN2

    def prior_bpd(self, x0):
        """L_T = KL(q(x_{T-1} | x0) || N(0, I)) in bits/dim, shape [B]."""
        t = jnp.full(x0.shape[:1], self.num_timesteps - 1, jnp.int32)
        mean, _, logvar = self.q_mean_variance(x0, t)
        return mean_flat(normal_kl(mean, logvar, 0.0, 0.0)) / LN2

    def bound_terms(self, apply_fn, x0, ts, noise, *, kind: str = "bound", clip_x0: bool = False, max_rows=0):
        """Bound terms for many timesteps at once: x0 [B, H, W, C], ts [K], noise [K, B, H, W, C] -> [B, K] bits/dim
        (kind as row_terms; clip_x0 clips the predicted x0 to [-1, 1], as the evaluation of 8-bit pixels does).
        `apply_fn(xt, t)` runs the network on a flat batch; max_rows bounds the rows per call (fold_timesteps)."""
        rows = lambda x0r, tr, nr: self._row_terms(apply_fn, x0r, tr, nr, kind, clip_x0)
        return fold_timesteps(rows, x0, ts, noise, max_rows)

    def row_terms(self, apply_fn, x0, t, noise, *, kind: str = "bound"):
        """Bound terms of independent rows: image x0[i] at timestep t[i] with noise[i] -> [R] bits/dim. kind
        "bound": L_t, the discretised decoder at t = 0; "kl": the Gaussian KL at every t, t = 0 included (the
        reference's reward, docs/method.md#reward)."""
        return self._row_terms(apply_fn, x0, t, noise, kind, False)

    def _row_terms(self, apply_fn, x0, t, noise, kind, clip_x0):
        fn = self.kl_terms_bpd if kind == "kl" else self.vb_terms_bpd
        xt = self.q_sample(x0, t, noise)
        return fn(x0, xt, t, apply_fn(xt, t), clip_x0)

    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0):
        """The full bound, NLL <= sum_{t=0}^{T-1} L_t + L_T, in bits/dim per example. Every t gets its own noise.

        Returns (nll [B], terms [B, T], prior [B]). pixels=True (8-bit pixels) clips x0_hat as improved-diffusion's
        calc_bpd_loop does (its clip_denoised).
        """
        ts = jnp.arange(self.num_timesteps, dtype=jnp.int32)
        noise = jax.random.normal(key, (self.num_timesteps,) + x0.shape, x0.dtype)
        terms = self.bound_terms(apply_fn, x0, ts, noise, clip_x0=pixels, max_rows=max_rows)
        prior = self.prior_bpd(x0)
        return terms.sum(axis=1) + prior, terms, prior

    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        """An unbiased estimate of nll_bpd's bound from num_t timesteps (gaussian.stratified_timesteps), per
        example: [B]. The noise is drawn as nll_bpd's (normal(key, [num_t, ...])): with num_t = T every stratum is
        one timestep and the estimate is exactly nll_bpd."""
        ts, weights = stratified_timesteps(self.num_timesteps, num_t, jax.random.fold_in(key, 0x7157))
        noise = jax.random.normal(key, (num_t,) + x0.shape, x0.dtype)
        terms = self.bound_terms(apply_fn, x0, ts, noise, clip_x0=pixels, max_rows=max_rows)
        return (terms * weights).sum(axis=1) + self.prior_bpd(x0)

    def nll_bpd_strata(self, apply_fn, x0, t_key, key, strata, per_stratum, decoder_draws, *, pixels=True, max_rows=0):
        """The stratified estimate of nll_bpd's bound with a standard error (base.Likelihood.nll_bpd_strata): (L_0 at
        decoder_draws noises [B, d], parts [B, K, m], prior L_T [B]). parts[:, k, j] = n_k L_{t_kj} over the K
        geometric strata of 1..T-1 (gaussian.strata_timesteps, drawn from t_key), n_k the stratum's size; every row
        with its own noise (from key), as nll_bpd's. d + K m network rows per image instead of T."""
        ts, sizes = strata_timesteps(self.num_timesteps, strata, per_stratum, t_key)
        d, n = decoder_draws, strata * per_stratum
        ts = jnp.concatenate([jnp.zeros((d,), jnp.int32), ts.reshape(-1)])
        noise = jax.random.normal(key, (d + n,) + x0.shape, x0.dtype)
        terms = self.bound_terms(apply_fn, x0, ts, noise, clip_x0=pixels, max_rows=max_rows)
        parts = terms[:, d:].reshape(x0.shape[0], strata, per_stratum) * sizes[:, None]
        return terms[:, :d], parts, self.prior_bpd(x0)

    def strata_protocol(self, strata: int, per_stratum: int, decoder_draws: int) -> dict:
        """How nll_bpd_strata's estimate was computed (--mode=eval's JSON)."""
        return dict(
            timesteps_per_image=decoder_draws + strata * per_stratum,
            strata=strata,
            per_stratum=per_stratum,
            decoder_draws=decoder_draws,
            bound=f"unbiased stratified estimate of sum_t L_t + L_T: L_0 from {decoder_draws} noise draws, "
            f"{strata} geometric strata of 1..T-1 (T = {self.num_timesteps}) with {per_stratum} uniform timesteps "
            "in each (the same for every image, fresh noise per image and row), weighted by stratum size, L_T "
            "exact; clip_denoised (not for latents), discretised decoder at t=0",
        )

    @classmethod
    def strata_problem(cls, cfg, num_strata: int):
        """The strata cut 1..T-1, each at least one timestep: at most T - 1 of them."""
        if num_strata > cfg.num_timesteps - 1:
            return f"must be an integer in 0..{cfg.num_timesteps - 1}: each stratum of 1..T-1 holds a timestep"
        return None

    # -- sampling ----------------------------------------------------------------------------------------------
    def guide(self, out_cond, out_uncond, scale):
        """Classifier-free guidance of network outputs [B, ..., C or 2C]: out_uncond + scale (out_cond - out_uncond)
        on the mean part; a learned variance's channels are out_cond's (DiT's forward_with_cfg guides only the eps
        channels; DiT guides 3 of 4 latent channels by default, we guide all C). scale == 1 returns out_cond exactly
        (a Python number short-cuts; a traced scale selects it with jnp.where)."""
        if isinstance(scale, (int, float)) and scale == 1:
            return out_cond
        c = out_cond.shape[-1] // 2 if self.learned_variance else out_cond.shape[-1]
        cond, uncond = out_cond[..., :c], out_uncond[..., :c]
        guided = jnp.where(scale == 1, cond, uncond + scale * (cond - uncond))
        if self.learned_variance:
            guided = jnp.concatenate([guided, out_cond[..., c:]], axis=-1)
        return guided

    def prior_sample(self, key, shape):
        """A draw of the prior at the last step, N(0, I): [shape] float32 (the samplers' start)."""
        return jax.random.normal(key, shape)

    def prior_logp(self, x):
        """log N(x; 0, I) [B] in nats."""
        return standard_normal_logp(x)

    def sample(
        self, apply_fn, key, shape, method: str = "ancestral", steps: int = 0, constrain=sampling.same, clip=True
    ):
        """Samples in [-1, 1] of `shape` from the reverse process: "ancestral" (all T steps) or "ddim" (`steps`);
        clip=False for data that is not bounded (latents): no clipping of x0-predictions or of the result."""
        if method == "ddim":
            return sampling.ddim(apply_fn, self, key, shape, steps, constrain=constrain, clip=clip)
        if method == "ancestral":
            return sampling.ancestral(apply_fn, self, key, shape, constrain=constrain, clip=clip)
        raise ValueError(f"sampling method {method!r} is not one of {', '.join(sampling.METHODS)}")

    def bound_protocol(self) -> dict:
        """How nll_bpd's number was computed (written next to it by --mode=eval)."""
        return dict(
            timesteps=self.num_timesteps,
            bound="sum_t L_t + L_T, fresh noise per t, clip_denoised (not for latents), discretised decoder at t=0",
        )

    def estimate_protocol(self, num_t: int) -> str:
        """What nll_bpd_estimate(num_t) computes (the periodic evaluation's label)."""
        return (
            f"unbiased stratified estimate of the test bound: t = 0 plus one random t in each of {num_t - 1} "
            "geometrically spaced strata of 1..T-1, weighted by stratum size"
        )

    def uses_steps(self, method: str) -> bool:
        """Whether `method` takes a step count (ddim; ancestral runs all T)."""
        return method == "ddim"

    methods = sampling.METHODS

    @classmethod
    def lacks(cls, capability: str, cfg) -> tuple:
        """(where, why) of a refusal: the process named as a config phrase, and why it lacks `capability`."""
        return f"the discrete-time process {cfg.name!r}", f"it has no {capability} form"

    default_method = "ddim"  # what a config switched to this process samples with (training/schema.switch_part)

    def sampling_steps(self, method: str, steps: int) -> int:
        """Network evaluations of a sample with `method` (the protocol written next to FID)."""
        return steps if method == "ddim" else self.num_timesteps
