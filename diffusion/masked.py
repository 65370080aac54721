"""Masked (absorbing-state) diffusion of tokens in continuous time (config.diffusion, name "masked"): MD4 (Shi et
al. 2024, google-deepmind/md4 `md4/models/diffusion/md4.py`) and MDLM (Sahoo et al. 2024, kuleshov-group/mdlm).

Data x0 are int32 tokens [B, L] in 0..V-1; [MASK] is token V (MD4's convention). At masking time s in [0, 1] each
token is kept with probability alpha(s) and otherwise replaced by [MASK], independently: with u ~ U[0, 1) per token
(the process's noise, `draw_noise`), x_s = x0 where u < alpha(s), else [MASK] (MD4's `forward_sample`: a Bernoulli
keep of probability alpha is uniform < alpha). The network sees x_s and time_scale * s and returns logits [B, L, V]
over the V data tokens (it never predicts [MASK]); unmasked tokens are carried over (MD4's and MDLM's
parameterisation), so only the masked ones cost anything.

Schedules alpha(s), decreasing from alpha(0) = 1 to alpha(1) = 0, each with its derivative in closed form:
    linear       1 - s                                   (MD4's "linear")
    cosine       cos(pi s / 2)                           (the usual cosine masking schedule)
    cosine_md4   1 - sin(pi s / 2) = 1 - cos(pi (1 - s) / 2)   (what MD4 calls "cosine": the mirror image)
    polynomial   1 - s^power                             (MD4's "poly<power>")
    loglinear    1 - (1 - eps) s                         (MDLM's log-linear noise, sigma(s) = -log(1 - (1 - eps) s))

The bound (MD4 eq. 5 / MDLM eq. 10): with w(s) = -alpha'(s) / (1 - alpha(s)),
    NELBO(x0) = int w(s) E_q[ sum_{l masked in x_s} -log p_theta(x0_l | x_s) ] ds + reconstruction + prior,
in nats per sequence; divided by L ln 2 it is in bits per token (bits per character on a character corpus), as MD4's
`loss2bpt`. The bound is invariant to the schedule between its end points (change variables to alpha), so the
schedule and a time sampler with importance weights only change the variance of its estimate.

Time and noise level. The time t in [0, 1] that samplers draw is not the masking rate: the masking time is s(t)
(below) and the masking rate, the expected fraction of [MASK] tokens, is m = 1 - alpha(s(t)); m is t (up to the
ends' eps) only for the linear schedule. With the masked cross-entropy per token c(m), the integrand per unit of t
is (dm/dt) c(m) / ln 2 in bits per token, so the diffusion term is int c(m) dm / ln 2 over m in [m(0), m(1)]
whatever the schedule. As a NoiseLevel (diffusion/base.py) the process offers m as its noise level
(t_of_sigma: the time of a masking rate) and lambda = log(alpha / (1 - alpha)) as its log SNR (t_of_logsnr): a
sampler's density over m or lambda then means the same masking rates under every schedule (samplers/bell.py,
logitnormal.py, adaptive_noise.py; docs/method.md#time-samplers-on-the-masked-process).

Ends of time (config.diffusion.ends):
- "truncate" (MDLM; the default): s = eps + (1 - eps) t for the time t in [0, 1] that samplers draw, so s lies in
  [eps, 1] and w(s) stays finite (1 / s for linear); the integrand per unit of t carries the factor (1 - eps). The
  data end [0, eps] is the reconstruction term, bounded (as MD4's `recon_loss`) by a uniform decoder of the tokens
  still masked at s = eps: L (1 - alpha(eps)) log V nats. Where alpha(1) = 0 (all but loglinear) x_1 is all [MASK]
  exactly and the prior term is 0 exactly: the number is a bound.
- "squeeze" (MD4, for the comparison with its code): s = t, alpha(s) = (1 - 2 eps) alpha_raw(s) + eps (MD4's
  `MaskingSchedule` with its eps, there hard-coded 1e-4), so w(0) is about 1 / eps, not 1 / s; reconstruction
  L eps log V (MD4's `recon_loss`), prior 0 (MD4's `latent_loss`).

MD4's quirks (google-deepmind/md4 at b9fbf29), followed or fixed:
- kept iff u < alpha: followed. [MASK] = V, logits over V tokens, cross-entropy of masked tokens only: followed.
- The per-token normalisation L ln 2 of every loss term: followed (bits per token over the whole length).
- alpha squeezed by a hard-coded eps = 1e-4: offered as ends="squeeze" with eps a field; the default truncates t
  (MDLM) and keeps the schedule's exact ends.
- "cosine" = 1 - sin(pi t / 2): offered as "cosine_md4"; "cosine" here is the usual cos(pi t / 2).
- Reconstruction as the constant L (1 - alpha(0)) log V and prior 0: followed (the uniform decoder makes it a valid
  bound of the data end); under "truncate" the prior is 0 exactly; under "squeeze" and for loglinear (alpha(1) =
  eps) x_1 keeps a fraction eps of the tokens, a term of order L eps log V that MD4 and MDLM leave out, as here.
- The discrete-time loss (t mapped to (floor(t T) + 1) / T, float32 rounding alpha_s to alpha_t near 0): not
  offered; this process is continuous-time only.
- Antithetic time by jnp.arange(0, 1, 1 / B), which returns B + 1 values for some B: the project's antithetic
  sampler (samplers/antithetic.py) uses arange(B) / B, B values for every B.

Ancestral sampling (MD4's `ancestral_sample_step`, MDLM's sampler): on an even grid of `steps` steps in s from 1 to
0, a masked token at t is unmasked at s < t with probability (alpha(s) - alpha(t)) / (1 - alpha(t)) and then drawn
from the network's softmax; unmasked tokens stay. The last step unmasks every token still masked (MD4 instead decodes
them by argmax after the loop: one network call more, the same under "truncate" where alpha(0) = 1).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from config.fields import Choice, ConfigError, FieldError, Int, Num
from diffusion.base import PROCESSES, Likelihood, NoiseLevel, Process, Sampling
from diffusion.continuous import stratified_times
from diffusion.gaussian import LN2
from diffusion.time import ContinuousTime

SCHEDULES = ("linear", "cosine", "cosine_md4", "polynomial", "loglinear")
ENDS = ("truncate", "squeeze")
METHODS = ("ancestral",)


def schedule_alpha(name: str, s, power: float = 2.0, eps: float = 0.0, xp=jnp):
    """(alpha(s), alpha'(s)) of schedule `name` before any squeezing (module docstring), in s's dtype; xp = numpy
    for float64 on the host."""
    if name == "linear":
        return 1.0 - s, -xp.ones_like(s)
    if name == "cosine":
        return xp.cos(0.5 * math.pi * s), -0.5 * math.pi * xp.sin(0.5 * math.pi * s)
    if name == "cosine_md4":
        # written as md4 writes it (1 - cos(pi (1 - s) / 2)), which rounds differently from 1 - sin(pi s / 2)
        return 1.0 - xp.cos(0.5 * math.pi * (1.0 - s)), -0.5 * math.pi * xp.sin(0.5 * math.pi * (1.0 - s))
    if name == "polynomial":
        return 1.0 - s**power, -power * s ** (power - 1.0)
    if name == "loglinear":
        return 1.0 - (1.0 - eps) * s, -(1.0 - eps) * xp.ones_like(s)
    raise ValueError(f"masking schedule {name!r} is not one of {', '.join(SCHEDULES)}")


def schedule_time(name: str, a, power: float = 2.0, eps: float = 0.0, xp=jnp):
    """The masking time s of alpha = a under schedule `name` before any squeezing, the inverse of schedule_alpha: a
    in [0, 1] (clipped there), s in its dtype."""
    a = xp.clip(a, 0.0, 1.0)
    if name == "linear":
        return 1.0 - a
    if name == "cosine":
        return xp.arccos(a) / (0.5 * math.pi)
    if name == "cosine_md4":
        return 1.0 - xp.arccos(1.0 - a) / (0.5 * math.pi)
    if name == "polynomial":
        return (1.0 - a) ** (1.0 / power)
    if name == "loglinear":
        return (1.0 - a) / (1.0 - eps)
    raise ValueError(f"masking schedule {name!r} is not one of {', '.join(SCHEDULES)}")


def check_tokens(cfg, ctx):
    """A process on tokens needs a dataset of tokens with its vocabulary (ctx["vocab_size"]: 0 for images)."""
    if not ctx["vocab_size"]:
        raise FieldError(
            "vocab_size",
            cfg.vocab_size,
            f"config.data.name={ctx['data_name']!r} holds no tokens (text: kjv, text_files, tiny_text)",
        )
    if cfg.vocab_size != ctx["vocab_size"]:
        raise FieldError("vocab_size", cfg.vocab_size, f"must be {ctx['vocab_size']}, config.data.name's vocabulary")


def check_attention(process: str, ctx, causal: bool):
    """The token network's attention must be what the process reads: causal for the autoregressive baseline (a
    network that sees token l while predicting it learns to copy it), bidirectional for masked diffusion."""
    if ctx["causal"] != causal:
        why = (
            "next-token prediction needs causal attention (a network that sees token l while predicting it copies it)"
            if causal
            else "the masked model reads the whole sequence (model.causal=True is the autoregressive baseline, "
            "config.diffusion.name='autoregressive')"
        )
        raise ConfigError(
            f"config.model.causal={ctx['causal']!r} is not allowed with config.diffusion.name={process!r}: {why}; "
            f"use config.model.causal={causal!r}"
        )


def masked_cross_entropy(logits, x0, xt, mask_id: int):
    """sum over the masked positions of -log softmax(logits)[x0]: [B] nats. logits [B, L, V], x0, xt [B, L]."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    ce = -jnp.take_along_axis(logp, x0[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(xt == mask_id, ce, 0.0), axis=-1)


@PROCESSES.register
class Masked(Process, NoiseLevel, Sampling, Likelihood):
    """Masked diffusion of tokens (module docstring)."""

    name = "masked"
    time_domain = ContinuousTime
    methods = METHODS
    default_method = "ancestral"
    FIELDS = dict(
        vocab_size=Int(27, 2),  # V data tokens (27: a-z and space); [MASK] is token V
        schedule=Choice("linear", SCHEDULES),
        power=Num(2.0, 0.0, lo_open=True, note="the polynomial schedule's exponent"),
        ends=Choice("truncate", ENDS),
        eps=Num(1e-3, 0.0, 0.5, hi_open=True, note="MDLM: 1e-3 (truncate); MD4: 1e-4 (squeeze)"),
        # the network sees time_scale * s (1000: the resolution of the sinusoidal embeddings, as continuous.py's)
        time_scale=Num(1000.0, 0.0, lo_open=True),
        grid=Int(1000, 2),  # the resolution of [0, 1] for grids (as config.diffusion.grid of "vp")
        likelihood_steps=Int(128, 1),  # stratified times of the bound in --mode=eval
    )

    @classmethod
    def check(cls, cfg, ctx):
        check_tokens(cfg, ctx)
        check_attention(cls.name, ctx, causal=False)

    def __init__(self, **fields):
        """Masked diffusion with its FIELDS' defaults, any of them given by keyword."""
        f = self.field_values(fields)
        if f["schedule"] not in SCHEDULES:
            raise ValueError(f"schedule {f['schedule']!r} is not one of {', '.join(SCHEDULES)}")
        if f["ends"] not in ENDS:
            raise ValueError(f"ends {f['ends']!r} is not one of {', '.join(ENDS)}")
        self.vocab_size, self.schedule, self.power = int(f["vocab_size"]), f["schedule"], float(f["power"])
        self.ends, self.eps, self.time_scale = f["ends"], float(f["eps"]), float(f["time_scale"])
        self.grid, self.likelihood_steps = int(f["grid"]), int(f["likelihood_steps"])
        self.mask_id = self.vocab_size

    # -- time and the schedule -----------------------------------------------------------------------------------
    def masking_time(self, t):
        """s(t): the masking time of the sampler's time t in [0, 1] (eps + (1 - eps) t when truncating)."""
        if self.ends == "truncate":
            return self.eps + (1.0 - self.eps) * t
        return t

    def dmasking_time(self) -> float:
        """ds / dt."""
        return 1.0 - self.eps if self.ends == "truncate" else 1.0

    def alpha(self, s, xp=jnp):
        """(alpha(s), alpha'(s)) at masking time s [B] (squeezed as MD4's under ends="squeeze"); xp = numpy for
        float64 on the host."""
        a, da = schedule_alpha(self.schedule, s, self.power, self.eps, xp)
        if self.ends == "squeeze":
            return (1.0 - 2.0 * self.eps) * a + self.eps, (1.0 - 2.0 * self.eps) * da
        return a, da

    def time_of_alpha(self, a, xp=jnp):
        """The sampler's time t in [0, 1] at which alpha(s(t)) = a [B] (clipped into [0, 1]), the inverse of alpha
        and of masking_time."""
        if self.ends == "squeeze":
            a = (a - self.eps) / (1.0 - 2.0 * self.eps)
        s = schedule_time(self.schedule, a, self.power, self.eps, xp)
        t = (s - self.eps) / (1.0 - self.eps) if self.ends == "truncate" else s
        return xp.clip(t, 0.0, 1.0)

    # -- the noise level (diffusion.base.NoiseLevel): the samplers' densities over it are the same for every
    # schedule, since the bound is a function of alpha alone (module docstring)
    def logsnr(self, t):
        """lambda = log(alpha / (1 - alpha)) at t [B], the log-odds that a token is kept (alpha = sigmoid(lambda), as
        alpha^2 on a VP path): float32 [B], -inf where every token is masked."""
        a = self.alpha(self.masking_time(t))[0]
        return jnp.log(a) - jnp.log1p(-a)

    def t_of_logsnr(self, lam):
        """The time of log-odds lam [B], clipped into [0, 1]."""
        return self.time_of_alpha(jax.nn.sigmoid(lam))

    def t_of_sigma(self, n):
        """The time whose masking rate 1 - alpha is n [B], clipped into [0, 1] (a rate beyond the schedule's ends,
        which truncation or squeezing keep from 0 and 1, lands on the end)."""
        return self.time_of_alpha(1.0 - n)

    def weight(self, s, xp=jnp):
        """w(s) = -alpha'(s) / (1 - alpha(s)) [B], the bound's weight of the masked cross-entropy."""
        a, da = self.alpha(s, xp)
        return -da / (1.0 - a)

    # -- data and noise ------------------------------------------------------------------------------------------
    def data_in(self, batch):
        """Tokens [B, L] as int32."""
        return jnp.asarray(batch).astype(jnp.int32)

    def data_out(self, x):
        """Token samples as the dataset's tokens: uint8 [B, L] ([MASK] = V never remains after sampling)."""
        return x.astype(jnp.uint8)

    def draw_noise(self, key, x0):
        """One uniform per token: [B, L] float32 (a token is kept where it is below alpha)."""
        return jax.random.uniform(key, x0.shape, jnp.float32)

    def out_channels(self, channels: int) -> int:
        """The network's logits: one per data token (V), whatever the data's channel count."""
        return self.vocab_size

    # -- forward process and loss --------------------------------------------------------------------------------
    def q_sample(self, x0, t, noise):
        """x_t [B, L]: x0 where noise < alpha(s(t)), else [MASK]."""
        a = self.alpha(self.masking_time(t))[0]
        return jnp.where(noise < a[:, None], x0, self.mask_id).astype(jnp.int32)

    def net_time(self, t):
        return self.time_scale * self.masking_time(t)

    def integrand(self, logits, x0, xt, t):
        """The bound's integrand per unit of the sampler's time t: (ds/dt) w(s) masked CE / (L ln 2), [B] bits per
        token (its integral over t in [0, 1] is the bound's diffusion term)."""
        s = self.masking_time(t)
        ce = masked_cross_entropy(logits, x0, xt, self.mask_id)
        return self.dmasking_time() * self.weight(s) * ce / (x0.shape[-1] * LN2)

    def row_terms(self, apply_fn, x0, t, noise, *, kind: str = "bound"):
        """The integrand of independent rows (sequence x0[i], time t[i], uniforms noise[i]): [R] bits per token per
        unit of t, for either kind (the data end is no term of the integrand)."""
        xt = self.q_sample(x0, t, noise)
        return self.integrand(apply_fn(xt, self.net_time(t)), x0, xt, t)

    def example_losses(self, apply_fn, x0, t, noise):
        """(the bound's integrand at t [B] in bits per token, zeros [B]): its mean over uniform t is the bound's
        diffusion term (MD4's and MDLM's training loss)."""
        loss = self.row_terms(apply_fn, x0, t, noise)
        return loss, jnp.zeros_like(loss)

    # -- the prior and the ends of the bound ---------------------------------------------------------------------
    def prior_sample(self, key, shape):
        """All [MASK]: int32 [shape]."""
        return jnp.full(shape, self.mask_id, jnp.int32)

    def prior_logp(self, x):
        """log of the all-[MASK] point mass at x [B, L]: 0 where every token is [MASK], else -inf. [B] nats."""
        return jnp.where(jnp.all(x == self.mask_id, axis=-1), 0.0, -jnp.inf)

    def reconstruction_bpt(self) -> float:
        """The data end's term, a uniform decoder of the tokens still masked at the first masking time:
        (1 - alpha(s(0))) log V / ln 2 bits per token (MD4's recon_loss / (L ln 2))."""
        a0 = self.alpha(np.float64(self.masking_time(0.0)), np)[0]
        return float((1.0 - a0) * np.log(self.vocab_size) / np.log(2.0))

    # -- likelihood ----------------------------------------------------------------------------------------------
    def bound_terms(self, apply_fn, x0, ts, key):
        """The integrand at times ts [K] for every sequence, fresh uniforms per (time, sequence): [B, K]."""

        def one(carry, kt):
            k, t = kt
            tb = jnp.full(x0.shape[:1], t, jnp.float32)
            return carry, self.row_terms(apply_fn, x0, tb, self.draw_noise(k, x0))

        keys = jax.random.split(key, ts.shape[0])
        return jax.lax.scan(one, None, (keys, ts))[1].T

    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0, num_t: int = 0):
        """(bound [B] bits per token, diffusion term's K stratified terms [B, K], prior [B] = 0): the bound with its
        diffusion term estimated from K = num_t (default likelihood_steps) stratified times, one in each of K equal
        cells of [0, 1), unbiased; plus the reconstruction term (exact)."""
        k_t, k_noise = jax.random.split(key)
        num = int(num_t or self.likelihood_steps)
        terms = self.bound_terms(apply_fn, x0, stratified_times(k_t, num), k_noise) / num
        prior = jnp.zeros(x0.shape[:1], jnp.float32)
        return terms.sum(axis=1) + self.reconstruction_bpt() + prior, terms, prior

    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        """nll_bpd from num_t stratified times."""
        return self.nll_bpd(apply_fn, x0, key, num_t=num_t)[0]

    def bound_protocol(self) -> dict:
        return dict(
            bound=f"masked diffusion NELBO in bits per token ({self.schedule} schedule, ends={self.ends}, "
            f"eps={self.eps}): diffusion term from {self.likelihood_steps} stratified times (one uniform time in each "
            "of as many equal cells of [0, 1), fresh masks per time), plus the reconstruction term "
            "L (1 - alpha(s_min)) log V, prior term 0",
            units="bits per token",  # per character on a character corpus (data/text.py)
        )

    def estimate_protocol(self, num_t: int) -> str:
        return f"masked diffusion NELBO, bits per token, {num_t} stratified times"

    # -- sampling ------------------------------------------------------------------------------------------------
    def sample(self, apply_fn, key, shape, method: str = "ancestral", steps: int = 0, constrain=None, clip=True):
        """Token samples [shape] = [B, L] int32 by ancestral sampling over `steps` even steps of s from 1 to 0
        (module docstring). apply_fn(x_s, net time) -> logits."""
        if method not in METHODS:
            raise ValueError(f"sampling method {method!r} is not one of {', '.join(METHODS)} for masked diffusion")
        constrain = constrain or (lambda x: x)
        n = int(steps) or self.grid
        B = shape[0]
        x = constrain(self.prior_sample(key, shape))

        def body(i, x):
            t, s = (n - i) / n, (n - i - 1) / n
            a_t, a_s = self.alpha(jnp.asarray(t, jnp.float32))[0], self.alpha(jnp.asarray(s, jnp.float32))[0]
            unmask = jnp.where(i == n - 1, 1.0, (a_s - a_t) / (1.0 - a_t))
            logits = apply_fn(x, jnp.full((B,), self.time_scale * t, jnp.float32))
            k_draw, k_keep = jax.random.split(jax.random.fold_in(key, i))
            draw = jax.random.categorical(k_draw, logits.astype(jnp.float32), axis=-1)
            reveal = (x == self.mask_id) & (jax.random.uniform(k_keep, x.shape) < unmask)
            return constrain(jnp.where(reveal, draw, x).astype(jnp.int32))

        return jax.lax.fori_loop(0, n, body, x)
