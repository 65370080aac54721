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

from samplers.base import Sampler
from samplers.fstat import select_k_best
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob, sample_u, u_to_t

ENTROPY_FORMS = ("standard", "reference")


def sweep_grid(num_timesteps: int, stride: int):
    return jnp.arange(0, num_timesteps, stride, dtype=jnp.int32)


class AdaptiveSampler(Sampler):
    name = "adaptive"

    @classmethod
    def validate(cls, config):
        s, T, B = config.sampler.adaptive, config.diffusion.num_timesteps, config.train.batch_size
        if not 1 <= s.sweep_stride <= T:
            raise ValueError(f"config.sampler.adaptive.sweep_stride={s.sweep_stride} must be in 1..{T} (config.diffusion.num_timesteps)")
        K = len(range(0, T, s.sweep_stride))
        if not 1 <= s.num_selected <= K:
            raise ValueError(f"config.sampler.adaptive.num_selected={s.num_selected} (|S|) must be in 1..{K}: at most T={T} and "
                             f"at most the {K} timesteps of the sweep grid (stride {s.sweep_stride})")
        if s.buffer_size < 2:
            raise ValueError(f"config.sampler.adaptive.buffer_size={s.buffer_size} must be >= 2 (the F-statistic needs 2 rows)")
        pb = B if s.probe_batch_size == -1 else s.probe_batch_size
        if not (1 <= pb <= B and B % pb == 0):
            raise ValueError(f"config.sampler.adaptive.probe_batch_size={s.probe_batch_size} must be -1 (the whole batch) or a "
                             f"divisor of config.train.batch_size={B} (at most the batch)")
        if not 1 <= s.sweep_images <= B:
            raise ValueError(f"config.sampler.adaptive.sweep_images={s.sweep_images} must be in 1..{B} (config.train.batch_size)")
        if s.entropy_form not in ENTROPY_FORMS:
            raise ValueError(f"config.sampler.adaptive.entropy_form={s.entropy_form!r} is not one of {', '.join(ENTROPY_FORMS)}")

    def __init__(self, config, schedule):
        super().__init__(config, schedule)
        s = config.sampler.adaptive
        self.s = s
        self.policy = BetaPolicy(tuple(s.policy_channels), tuple(s.policy_hidden))
        self.tx = optax.chain(optax.clip_by_global_norm(s.policy_grad_clip),
                              optax.adam(s.policy_lr, b1=s.policy_b1, b2=s.policy_b2))
        self.grid = sweep_grid(self.T, s.sweep_stride)
        B = config.train.batch_size
        self.probe = B if s.probe_batch_size == -1 else s.probe_batch_size
        self.target, self.variance = config.diffusion.target, config.diffusion.variance

    def init(self, key, x0):
        params = self.policy.init(key, x0[:1])
        K = int(self.grid.shape[0])
        return dict(
            policy=params, opt=self.tx.init(params),
            X=jnp.zeros((self.s.buffer_size, K), jnp.float32), y=jnp.zeros((self.s.buffer_size,), jnp.float32),
            count=jnp.zeros((), jnp.int32), S=jnp.arange(self.s.num_selected, dtype=jnp.int32),
            updates=jnp.zeros((), jnp.int32), reward=jnp.zeros((), jnp.float32),
            policy_loss=jnp.zeros((), jnp.float32))

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
        if self.s.common_noise:
            kn_after, kd_after = kn_before, kd_before
        shape = (ts.shape[0],) + x0.shape
        drop = self.s.probe_dropout
        before = ctx.terms_fn(ctx.params_before, x0, ts, jax.random.normal(kn_before, shape),
                              dropout_key=kd_before if drop else None, kl_only=True, max_rows=self.s.probe_chunk_rows)
        after = ctx.terms_fn(ctx.params_after, x0, ts, jax.random.normal(kn_after, shape),
                             dropout_key=kd_after if drop else None, kl_only=True, max_rows=self.s.probe_chunk_rows)
        return before - after

    def _policy_loss(self, params, x0, u, reward):
        a, b = self.policy.apply(params, x0)
        logp = beta_log_prob(u, a, b)
        ent = beta_entropy(a, b)
        c = self.s.entropy_coef
        if self.s.entropy_form == "reference":
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

        pick = jax.random.choice(k_pick, ctx.x0.shape[0], (self.s.sweep_images,), replace=False)
        d = jnp.mean(self._delta(ctx, ctx.x0[pick], self.grid, k_sweep), axis=0)  # [K]
        row = state["count"] % self.s.buffer_size
        X = state["X"].at[row].set(d)
        y = state["y"].at[row].set(jnp.sum(d))
        count = state["count"] + 1
        valid = jnp.arange(self.s.buffer_size) < count
        S = jnp.where(count >= 2, self.grid[select_k_best(X, y, valid, self.s.num_selected)], state["S"])
        return dict(policy=policy, opt=opt, X=X, y=y, count=count, S=S, updates=state["updates"] + 1,
                    reward=jnp.mean(reward), policy_loss=loss)

    def update(self, state, ctx):
        is_update = ctx.step % self.s.update_every == 0
        state = jax.lax.cond(is_update, lambda s: self._policy_update(s, ctx), lambda s: s, state)
        metrics = dict(alpha_mean=jnp.mean(ctx.aux["alpha"]), beta_mean=jnp.mean(ctx.aux["beta"]),
                       reward_mean=state["reward"], policy_loss=state["policy_loss"], updates=state["updates"],
                       S=state["S"])
        return state, metrics
