"""The learned timestep sampler of Kim et al. (CVPR 2025), method.md section 1, as one part of the jitted step.

Every step: the Beta policy sees each image x0 and draws u ~ Beta(alpha, beta), t = round(u (T - 1)); the loss
weight is 1 (the non-uniform density deliberately re-weights the objective).

Every f_S-th step (step % f_S == 0, the first step included, as in the reference), under lax.cond:
  1. reward probes: for P probe images and the |S| timesteps S chosen at the previous update,
     R_i = sum_{s in S} KL_s(theta_k; x0_i) - KL_s(theta_{k+1}; x0_i) (bits/dim), theta_{k+1} the model after this
     step's update; KL is the Gaussian KL at every s, s = 0 included (as the reference does);
  2. REINFORCE: L = -mean_i log pi(u_i | x0_i) R_i - c_ent mean_i H_i ("standard"), or the reference's
     -mean_i log pi(u_i | x0_i) (R_i + c_ent H_i) with H not detached ("reference"); Adam + global-norm clipping;
  3. the sweep d_tau = KL_tau(theta_k) - KL_tau(theta_{k+1}) over the grid tau = 0, stride, 2 stride, ... on
     `sweep_images` random images of the batch (averaged), pushed with y = sum_tau d_tau into a ring buffer;
  4. S re-selected as the |S| grid timesteps with the highest F-statistic of y on d_tau, once the buffer has 2 rows.
Probes run the raw (not EMA) model, in train mode (dropout on) if `probe_dropout`; with `common_noise` the noise and
dropout masks before and after the update are the same (common random numbers: a pure variance reduction of R).
All terms for all probe timesteps are computed in one batched call per model (gaussian.bound_terms), folded
batch-major so they stay on the device that holds each image.
"""

import jax
import jax.numpy as jnp
import optax

from core.fields import Bool, Choice, FieldError, Int, Ints, Num
from samplers.base import SAMPLERS, Sampler
from samplers.fstat import select_k_best
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob, sample_u, u_to_t

ENTROPY_FORMS = ("standard", "reference")


def sweep_grid(num_timesteps: int, stride: int):
    return jnp.arange(0, num_timesteps, stride, dtype=jnp.int32)


@SAMPLERS.register
class AdaptiveSampler(Sampler):
    name = "adaptive"
    # Reference values (ku-dmlab/Adaptive-Timestep-Sampler) unless said otherwise.
    FIELDS = dict(
        num_selected=Int(3, 1),  # |S|
        update_every=Int(40, 1, mutable=True),  # f_S: policy update every f_S steps
        buffer_size=Int(20, 2, note="(the F-statistic needs 2 rows)"),  # rows of the sweep ring buffer
        policy_lr=Num(1e-2, 0.0, mutable=True),
        policy_b1=Num(0.9, 0.0, 1.0, hi_open=True),
        policy_b2=Num(0.999, 0.0, 1.0, hi_open=True),
        policy_grad_clip=Num(1.0, 0.0, lo_open=True),
        entropy_coef=Num(1e-2, 0.0, mutable=True),
        # standard: -E[log pi R] - c H (method.md 1.4); reference: -E[log pi (R + c H)], H not detached.
        entropy_form=Choice("standard", ENTROPY_FORMS),
        # The changes below keep a step with this sampler within 1.10x of a uniform step, amortised over f_S, on the
        # digits' small model (benchmarks/throughput.py on 2 CPU cores, README): with a 64-image probe and a stride
        # of 10 the ratio measured 1.09x-1.14x, with these 1.074x and 1.076x. configs/cifar10.py keeps the
        # reference probe.
        # Sweep every 20th timestep (reference: all T): the sweep is most of an update's cost; S is then chosen among
        # the timesteps 0, 20, 40, ...
        sweep_stride=Int(20, 1, "T"),
        sweep_images=Int(1, 1, "B"),  # images whose sweeps are averaged (reference: 1)
        # Images probed for the reward, spread evenly over the batch (reference: -1, the whole batch).
        probe_batch_size=Int(32, 1, extra=(-1,)),
        # Changed from the reference (fresh noise after the update): the same noise and dropout masks before and
        # after the update remove the noise's own variance from the reward without biasing it (common random
        # numbers).
        common_noise=Bool(True),
        probe_dropout=Bool(True),  # probe in train mode, dropout on (reference)
        # Probes run the network on at most this many rows at a time (0: all at once). Not in the reference.
        # Measured on 2 CPU cores: 32-row chunks make an update step faster than 128-row ones and remove the cost
        # that the update branch's scratch memory put on every other step (XLA sizes it for the largest branch).
        probe_chunk_rows=Int(32, 0),
        # A quarter of the reference policy's width (32, 64, 128 / 256, 256): its forward pass runs on every step,
        # and at full width it costs about 10% of the digits' 280k-parameter UNet's step (9.8 ms per 128 images on
        # one core). Measured amortised ratio with (16, 32, 64 / 128, 128): 1.136x; with this width: 1.09x (README).
        policy_channels=Ints((8, 16, 32), 1, allow_empty=True),
        policy_hidden=Ints((64, 64), 1, allow_empty=True),
    )

    @classmethod
    def check(cls, cfg, ctx):
        T, B = ctx["T"], ctx["B"]
        K = len(range(0, T, cfg.sweep_stride))
        if not cfg.num_selected <= K:
            raise FieldError(
                "num_selected",
                cfg.num_selected,
                f"|S| must be in 1..{K}: at most T={T} and at most the {K} timesteps of the sweep grid "
                f"(stride {cfg.sweep_stride})",
            )
        probe = B if cfg.probe_batch_size == -1 else cfg.probe_batch_size
        if not (probe <= B and B % probe == 0):
            raise FieldError(
                "probe_batch_size",
                cfg.probe_batch_size,
                f"must be -1 (the whole batch) or a divisor of config.train.batch_size={B} (at most the batch)",
            )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.policy = BetaPolicy(tuple(cfg.policy_channels), tuple(cfg.policy_hidden))
        self.tx = optax.chain(
            optax.clip_by_global_norm(cfg.policy_grad_clip),
            optax.adam(cfg.policy_lr, b1=cfg.policy_b1, b2=cfg.policy_b2),
        )
        self.grid = sweep_grid(self.T, cfg.sweep_stride)
        self.probe = batch_size if cfg.probe_batch_size == -1 else cfg.probe_batch_size

    def init(self, key, x0):
        params = self.policy.init(key, x0[:1])
        K = int(self.grid.shape[0])
        return dict(
            policy=params,
            opt=self.tx.init(params),
            X=jnp.zeros((self.cfg.buffer_size, K), jnp.float32),
            y=jnp.zeros((self.cfg.buffer_size,), jnp.float32),
            count=jnp.zeros((), jnp.int32),
            S=jnp.arange(self.cfg.num_selected, dtype=jnp.int32),
            updates=jnp.zeros((), jnp.int32),
            reward=jnp.zeros((), jnp.float32),
            policy_loss=jnp.zeros((), jnp.float32),
        )

    def sample(self, state, key, x0):
        a, b = self.policy.apply(state["policy"], x0)
        u = sample_u(key, a, b)
        return u_to_t(u, self.T), jnp.ones_like(u), dict(u=u, alpha=a, beta=b)

    # -- the policy-update branch -------------------------------------------------------------------------------
    def _probe_rows(self, x):
        """Every (B / P)-th image: spread evenly over the batch, so each device's shard gives the same number."""
        B = x.shape[0]
        return x.reshape((self.probe, B // self.probe) + x.shape[1:])[:, 0]

    def _delta(self, ctx, x0, ts, key):
        """KL(theta_k) - KL(theta_{k+1}) at timesteps ts [K] for images x0 [N]: [N, K]."""
        kn_before, kn_after, kd_before, kd_after = jax.random.split(key, 4)
        if self.cfg.common_noise:
            kn_after, kd_after = kn_before, kd_before
        shape = (ts.shape[0],) + x0.shape

        def kl(params, k_noise, k_dropout):
            dropout_key = k_dropout if self.cfg.probe_dropout else None
            noise = jax.random.normal(k_noise, shape)
            return ctx.terms_fn(
                params, x0, ts, noise, dropout_key=dropout_key, kl_only=True, max_rows=self.cfg.probe_chunk_rows
            )

        return kl(ctx.params_before, kn_before, kd_before) - kl(ctx.params_after, kn_after, kd_after)

    def _policy_loss(self, params, x0, u, reward):
        a, b = self.policy.apply(params, x0)
        logp = beta_log_prob(u, a, b)
        ent = beta_entropy(a, b)
        c = self.cfg.entropy_coef
        if self.cfg.entropy_form == "reference":
            return -jnp.mean(logp * (reward + c * ent))
        return -jnp.mean(logp * reward) - c * jnp.mean(ent)

    def _policy_update(self, state, ctx):
        k_probe, k_sweep, k_pick = jax.random.split(ctx.key, 3)
        xp = self._probe_rows(ctx.x0)
        up = self._probe_rows(ctx.aux["u"])
        reward = jnp.sum(self._delta(ctx, xp, state["S"], k_probe), axis=1)  # [P]

        loss, grads = jax.value_and_grad(self._policy_loss)(state["policy"], xp, up, jax.lax.stop_gradient(reward))
        updates, opt = self.tx.update(grads, state["opt"], state["policy"])
        policy = optax.apply_updates(state["policy"], updates)

        pick = jax.random.choice(k_pick, ctx.x0.shape[0], (self.cfg.sweep_images,), replace=False)
        d = jnp.mean(self._delta(ctx, ctx.x0[pick], self.grid, k_sweep), axis=0)  # [K]
        row = state["count"] % self.cfg.buffer_size
        X = state["X"].at[row].set(d)
        y = state["y"].at[row].set(jnp.sum(d))
        count = state["count"] + 1
        valid = jnp.arange(self.cfg.buffer_size) < count
        S = jnp.where(count >= 2, self.grid[select_k_best(X, y, valid, self.cfg.num_selected)], state["S"])
        return dict(
            policy=policy,
            opt=opt,
            X=X,
            y=y,
            count=count,
            S=S,
            updates=state["updates"] + 1,
            reward=jnp.mean(reward),
            policy_loss=loss,
        )

    def update(self, state, ctx):
        is_update = ctx.step % self.cfg.update_every == 0
        state = jax.lax.cond(is_update, lambda s: self._policy_update(s, ctx), lambda s: s, state)
        metrics = dict(
            alpha_mean=jnp.mean(ctx.aux["alpha"]),
            beta_mean=jnp.mean(ctx.aux["beta"]),
            reward_mean=state["reward"],
            policy_loss=state["policy_loss"],
            updates=state["updates"],
            S=state["S"],
        )
        return state, metrics
