"""The autoregressive baseline of masked diffusion language models (config.diffusion, name "autoregressive"): the
same tokens, the same network size (models/tokens.py with model.causal=True), trained by next-token cross-entropy,
the reference line masked diffusion papers report beside their own (MD4, MDLM: an AR transformer of the same size).

It sits on the process contract so that the train step, the checkpoints, the periodic evaluation and --mode=eval
run it unchanged: time t is drawn and ignored (the network of a causal model does not see it), x_t = x0, and the
per-example loss is the exact negative log-likelihood -sum_l log p(x0_l | x0_<l) / (L ln 2) in bits per token. As a
Likelihood, its bound's integrand over t in [0, 1] is that constant, so `nll_bpd` is exact (no Monte-Carlo over t).
Sampling draws the L tokens left to right, one network call each.
"""

import jax
import jax.numpy as jnp

from config.fields import Int
from diffusion.base import PROCESSES, Likelihood, Process, Sampling
from diffusion.gaussian import LN2
from diffusion.masked import check_attention, check_tokens
from diffusion.time import ContinuousTime


@PROCESSES.register
class Autoregressive(Process, Sampling, Likelihood):
    """Next-token prediction on the process contract (module docstring)."""

    name = "autoregressive"
    time_domain = ContinuousTime
    methods = ("ancestral",)
    default_method = "ancestral"
    exact_likelihood = True
    FIELDS = dict(
        vocab_size=Int(27, 2),  # V tokens; the causal network's begin token is row V of its table
        grid=Int(1000, 2),  # the resolution of [0, 1] for the samplers' grids (t is not used)
    )

    @classmethod
    def check(cls, cfg, ctx):
        check_tokens(cfg, ctx)
        check_attention(cls.name, ctx, causal=True)

    def __init__(self, **fields):
        f = self.field_values(fields)
        self.vocab_size, self.grid = int(f["vocab_size"]), int(f["grid"])

    def data_in(self, batch):
        return jnp.asarray(batch).astype(jnp.int32)

    def data_out(self, x):
        return x.astype(jnp.uint8)

    def draw_noise(self, key, x0):
        return jnp.zeros(x0.shape, jnp.float32)  # nothing is random in the loss

    def out_channels(self, channels: int) -> int:
        return self.vocab_size

    def q_sample(self, x0, t, noise):
        return x0

    def nll_rows(self, apply_fn, x0):
        """-sum_l log p(x0_l | x0_<l) / (L ln 2): [B] bits per token. apply_fn(x0, t) -> logits [B, L, V]."""
        logits = apply_fn(x0, jnp.zeros(x0.shape[:1], jnp.float32))
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, x0[..., None], axis=-1)[..., 0].mean(axis=-1) / LN2

    def example_losses(self, apply_fn, x0, t, noise):
        nll = self.nll_rows(apply_fn, x0)
        return nll, jnp.zeros_like(nll)

    def row_terms(self, apply_fn, x0, t, noise, *, kind: str = "bound"):
        return self.nll_rows(apply_fn, x0)

    def prior_sample(self, key, shape):
        return jnp.zeros(shape, jnp.int32)

    def prior_logp(self, x):
        return jnp.zeros(x.shape[:1], jnp.float32)

    def nll_bpd(self, apply_fn, x0, key, *, pixels: bool = True, max_rows: int = 0):
        return self.nll_rows(apply_fn, x0), None, None

    def nll_bpd_estimate(self, apply_fn, x0, key, num_t: int, *, pixels: bool = True, max_rows: int = 0):
        return self.nll_rows(apply_fn, x0)

    def bound_protocol(self) -> dict:
        return dict(bound="exact autoregressive negative log-likelihood", units="bits per token")

    def estimate_protocol(self, num_t: int) -> str:
        return "exact autoregressive negative log-likelihood, bits per token"

    def uses_steps(self, method: str) -> bool:
        return False

    def sample(self, apply_fn, key, shape, method: str = "ancestral", steps: int = 0, constrain=None, clip=True):
        """Tokens [shape] = [B, L] drawn left to right: token l from the logits at position l given tokens < l."""
        constrain = constrain or (lambda x: x)
        B, L = shape
        t = jnp.zeros((B,), jnp.float32)

        def body(i, x):
            logits = apply_fn(x, t)[:, i]
            return constrain(x.at[:, i].set(jax.random.categorical(jax.random.fold_in(key, i), logits, axis=-1)))

        return jax.lax.fori_loop(0, L, body, constrain(self.prior_sample(key, shape)))
