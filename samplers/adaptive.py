"""The learned timestep sampler of Kim et al. (CVPR 2025), docs/method.md#the-learned-sampler, in the jitted step.

Every step: the Beta policy sees each image x0 and draws u ~ Beta(alpha, beta), t = round(u (T - 1)); the loss
weight is 1 (the non-uniform density deliberately re-weights the objective). Options (defaults as the reference):
a fraction `uniform_mix` of the batch drawn uniformly instead, and `importance_weights` 1 / (T p(t)), p the policy's
(mixed) probability of t's rounding bin.

Every f_S-th step (step % f_S == 0, the first step included, as in the reference; the training loop compiles these
steps as a program of their own, Sampler.period):
  1. reward probes: for P probe images and the |S| timesteps S chosen at the previous update,
     R_i = sum_{s in S} KL_s(theta_k; x0_i) - KL_s(theta_{k+1}; x0_i) (bits/dim), theta_{k+1} the model after this
     step's update; KL is the Gaussian KL at every s, s = 0 included (as the reference does);
  2. REINFORCE: L = -mean_i log pi(u_i | x0_i) A_i - c_ent mean_i H_i ("standard"), or the reference's
     -mean_i log pi(u_i | x0_i) (A_i + c_ent H_i) with H not detached ("reference"); A_i = R_i, or R_i minus a
     running mean of the reward with `reward_baseline`; Adam + global-norm clipping;
  3. the sweep d_tau = KL_tau(theta_k) - KL_tau(theta_{k+1}) over the grid (every `sweep_stride`-th timestep, or a
     geometric grid of as many) on `sweep_images` random images of the batch (averaged), pushed with
     y = sum_tau d_tau into a ring buffer;
  4. S re-selected as the |S| grid timesteps with the highest F-statistic of y on d_tau over the buffer's valid rows.
Probes run the raw (not EMA) model, in train mode (dropout on) if `probe_dropout`; with `common_noise` the noise and
dropout masks before and after the update are the same (common random numbers: a pure variance reduction of R).
The probe and sweep rows (image, timestep, noise) are spread over the data axis and run in chunks of at most
`probe_chunk_rows` rows per device (training/rows.py), each chunk with dropout masks of its own: the sweep costs each
device 1/D of the grid, as the reference splits it over its GPUs.

Deviations from the reference code, written down (docs/method.md#deviations-from-the-reference-code):
- Rows of the buffer that are all zero (an update that changed nothing) are not valid rows of the F-statistic, as the
  reference drops them before f_regression.
- S is re-selected only once `select_min_rows` (3) valid rows exist; the reference re-selects from 2, where every
  non-constant column has the maximal F-score and the tie rule picks the last grid timesteps.
- With `uniform_mix`, the uniformly drawn examples are left out of the REINFORCE term (their u is not a draw of the
  policy); the entropy term covers every probe image.

Continuous time (process.time a ContinuousTime; vp, flow, edm): t = u ~ Beta(alpha(x0), beta(x0)) itself, no
rounding; importance weights are 1 / p(u) with p the (mixed) Beta density (floored at MIN_BIN_MASS). The
sweep grid has as many times as the discrete one would on T = config.diffusion.grid (K = ceil(grid / stride)):
"even" the cell midpoints t_k = (k + 1/2) / K, "geometric" K times evenly spaced in log SNR between those of the
first and last midpoints (geometric in SNR; t = 0 and 1 are left out, where a flow's log SNR is infinite). S starts
at the first |S| grid times. The reward (`reward`): "bound" is the reduction of the bound's terms at S, on the DDPM
chain the Gaussian KL (the paper) and in continuous time the ELBO integrand -1/2 lambda'(t) |eps - eps_hat|^2 in
bits/dim (continuous.elbo_integrand; the same objective carried over) times 1 / grid: the integrand is per unit of
t, so one grid cell's share of the bound is the counterpart of one step's KL on a chain of grid steps, and every
field (entropy_coef, policy_grad_clip, policy_lr) means the same in both domains; "loss" the reduction of the
training objective w(t) MSE at S (plus a learned variance's term). The default, "bound", is the paper's objective,
and in continuous time it was chosen over "loss" by measurement, before the per-cell scale
(docs/benchmarks.md#flow-matching-on-the-digits-2026-12-01).
"""

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import betainc

from core.fields import Bool, Choice, FieldError, Int, Ints, Num
from core.registry import Need
from diffusion.time import continuous_grid, sweep_grid  # noqa: F401 (the sweep grids, importable from here)
from samplers.base import SAMPLERS, Sampler
from samplers.fstat import f_statistic, top_k_highest
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob, sample_u

ENTROPY_FORMS = ("standard", "reference")
GRIDS = ("even", "geometric")
REWARDS = ("bound", "loss")
MIN_BIN_MASS = 1e-3  # importance weights use max(p(t), MIN_BIN_MASS / T): at most 1000


def bins_mass(a, b, edges_u):
    """Each image's probability of each bin of u between edges_u [num_bins + 1] (the time domain's unit_edges: the
    bins of t of the timestep histogram): a, b: [N] -> [N, num_bins]."""
    cdf = betainc(a[:, None], b[:, None], edges_u[None, :])
    return jnp.diff(cdf, axis=1)


@SAMPLERS.register
class AdaptiveSampler(Sampler):
    name = "adaptive"
    continuous = True
    # Reference values (ku-dmlab/Adaptive-Timestep-Sampler) unless said otherwise.
    FIELDS = dict(
        num_selected=Int(3, 1),  # |S|
        update_every=Int(40, 1, mutable=True),  # f_S: policy update every f_S steps
        buffer_size=Int(20, 2, note="(the F-statistic needs 2 rows)"),  # rows of the sweep ring buffer
        # valid buffer rows before S is re-selected (reference: 2, where every column's F is maximal)
        select_min_rows=Int(3, 2),
        policy_lr=Num(1e-2, 0.0, mutable=True),
        policy_b1=Num(0.9, 0.0, 1.0, hi_open=True),
        policy_b2=Num(0.999, 0.0, 1.0, hi_open=True),
        policy_grad_clip=Num(1.0, 0.0, lo_open=True),
        entropy_coef=Num(1e-2, 0.0, mutable=True),
        # standard: -E[log pi R] - c H (docs/method.md#policy-update); reference: -E[log pi (R + c H)], H not detached.
        entropy_form=Choice("standard", ENTROPY_FORMS),
        # REINFORCE baseline: 0 (reference) none; else the decay of a bias-corrected running mean of the mean reward,
        # subtracted from each reward (a variance reduction; the expected gradient is unchanged)
        reward_baseline=Num(0.0, 0.0, 1.0, hi_open=True),
        # a fraction of each batch drawn uniformly instead of from the policy (reference: 0)
        uniform_mix=Num(0.0, 0.0, 1.0),
        # loss weights 1 / (T p(t)), p the (mixed) probability of t's rounding bin, floored at MIN_BIN_MASS / T
        # (reference: none; the density deliberately re-weights the objective)
        importance_weights=Bool(False),
        # The changes below keep a step with this sampler close to a uniform step, amortised over f_S, on the digits'
        # small model (docs/benchmarks.md#the-learned-samplers-own-settings). configs/cifar10.py keeps the reference
        # probe.
        # Sweep every 20th timestep (reference: all T): the sweep is most of an update's cost; S is then chosen among
        # the timesteps 0, 20, 40, ... ("even"), or among as many geometrically spaced ones ("geometric")
        sweep_stride=Int(20, 1, "T"),
        sweep_grid=Choice("even", GRIDS),
        sweep_images=Int(1, 1, "B"),  # images whose sweeps are averaged (reference: 1)
        # Images probed for the reward, spread evenly over the batch (reference: -1, the whole batch); a multiple of
        # the data axis's device count, so that every device probes as many
        probe_batch_size=Int(32, 1, extra=(-1,)),
        # Changed from the reference (fresh noise after the update): the same noise and dropout masks before and
        # after the update remove the noise's own variance from the reward without biasing it (common random
        # numbers).
        common_noise=Bool(True),
        probe_dropout=Bool(True),  # probe in train mode, dropout on (reference)
        # Probes and sweep run the network on at most this many rows per device at a time (0: all at once); each
        # chunk draws its own dropout masks. Not in the reference. Small chunks bound the update's scratch memory,
        # which XLA sizes for the largest branch (docs/benchmarks.md#the-learned-samplers-own-settings).
        probe_chunk_rows=Int(16, 0),
        # A quarter of the reference policy's width (32, 64, 128 / 256, 256): its forward pass runs on every step,
        # where at full width it is a visible share of the digits' small UNet's step
        # (docs/benchmarks.md#the-learned-samplers-own-settings).
        policy_channels=Ints((8, 16, 32), 1, allow_empty=True),
        policy_hidden=Ints((64, 64), 1, allow_empty=True),
        # bins of t for the diagnostics of the policy's density (sampler/policy_density in metrics.jsonl)
        density_bins=Int(50, 1, "T"),
        # what the reward is the reduction of at S: the bound's terms, or the training loss (module docstring)
        reward=Choice("bound", REWARDS),
    )

    @classmethod
    def needs(cls, cfg):
        out = super().needs(cfg)
        if cfg.sweep_grid == "geometric":  # spaced in log SNR: mapped back to times
            out.append(Need("invertible", "sweep_grid", "geometric", "even"))
        if not cfg.importance_weights:
            why = (
                "the schedule's interior descends the bound only where t is uniform or importance-weighted (without "
                "the weights it learns to move log SNR away from where the policy samples)"
            )
            out.append(Need("fixed_schedule", "importance_weights", False, "True", why))
        return out

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
        if cfg.select_min_rows > cfg.buffer_size:
            raise FieldError("select_min_rows", cfg.select_min_rows, f"must be at most buffer_size={cfg.buffer_size}")
        probe = B if cfg.probe_batch_size == -1 else cfg.probe_batch_size
        if not (probe <= B and B % probe == 0):
            raise FieldError(
                "probe_batch_size",
                cfg.probe_batch_size,
                f"must be -1 (the whole batch) or a divisor of config.train.batch_size={B} (at most the batch)",
            )
        D = ctx.values.get("D", (1,))[0]  # the data axis's devices, when they are known
        if probe % D:
            raise FieldError(
                "probe_batch_size",
                cfg.probe_batch_size,
                f"must be a multiple of the {D} devices of the data axis (every device probes as many images)",
            )

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.policy = BetaPolicy(tuple(cfg.policy_channels), tuple(cfg.policy_hidden))
        self.tx = optax.chain(
            optax.clip_by_global_norm(cfg.policy_grad_clip),
            optax.adam(cfg.policy_lr, b1=cfg.policy_b1, b2=cfg.policy_b2),
        )
        self.grid = self.time.sweep(process, cfg.sweep_stride, cfg.sweep_grid)
        self.reward_kind = cfg.get("reward", "bound")
        # one grid cell's share of the bound (1 on the chain: a step's KL; 1 / grid in continuous time, where the
        # ELBO integrand is per unit of t), so that entropy_coef and policy_grad_clip mean the same in both domains
        self.reward_scale = self.time.cell_share if self.reward_kind == "bound" else 1.0
        self.probe = batch_size if cfg.probe_batch_size == -1 else cfg.probe_batch_size

    def init(self, key, x0):
        params = self.policy.init(key, x0[:1])
        K, n = int(self.grid.shape[0]), self.cfg.num_selected
        zero = jnp.zeros((), jnp.float32)
        return dict(
            policy=params,
            opt=self.tx.init(params),
            X=jnp.zeros((self.cfg.buffer_size, K), jnp.float32),
            y=jnp.zeros((self.cfg.buffer_size,), jnp.float32),
            count=jnp.zeros((), jnp.int32),
            # the reference's initial S = {0, 1, 2}; in continuous time the first grid times
            S=self.time.first(self.grid, n),
            updates=jnp.zeros((), jnp.int32),
            reward=zero,
            policy_loss=zero,
            baseline=zero,  # the running mean of the mean reward, before bias correction
            reward_per_s=jnp.zeros((n,), jnp.float32),
            f_top=jnp.zeros((n,), jnp.float32),
            density=jnp.zeros((self.cfg.density_bins,), jnp.float32),
            spread=zero,
        )

    def sample(self, state, key, x0):
        a, b = self.policy.apply(state["policy"], x0)
        u = sample_u(key, a, b)
        t = self.time.from_unit(u, "nearest")  # the reference's round(u (T - 1)) on the chain
        aux = dict(u=u, alpha=a, beta=b)
        eps = self.cfg.uniform_mix
        if eps > 0:
            k_mix, k_uniform = jax.random.split(jax.random.fold_in(key, 1))
            uniform = jax.random.uniform(k_mix, t.shape) < eps
            t = jnp.where(uniform, self.time.uniform(k_uniform, t.shape[0]), t)
            aux["from_policy"] = ~uniform
        weights = self.importance_weights(a, b, t) if self.cfg.importance_weights else jnp.ones_like(u)
        return t, weights, aux

    def importance_weights(self, a, b, t):
        """1 / (T p(t)) on the chain, p the (mixed) policy's probability of t's rounding bin floored at
        MIN_BIN_MASS / T; in continuous time 1 / p(t), p the (mixed) Beta density floored at MIN_BIN_MASS. [N]."""
        eps, n = self.cfg.uniform_mix, self.time.cells  # n: T on the chain, 1 in continuous time
        q = self.time.probability(t, lambda x: betainc(a, b, x), lambda x: beta_log_prob(x, a, b))
        p = (1.0 - eps) * q + eps / n
        return 1.0 / (n * jnp.maximum(p, MIN_BIN_MASS / n))

    # -- the policy-update branch -------------------------------------------------------------------------------
    def _probe_rows(self, x):
        """Every (B / P)-th image: spread evenly over the batch, so each device's shard gives the same number."""
        B = x.shape[0]
        return x.reshape((self.probe, B // self.probe) + x.shape[1:])[:, 0]

    def _delta(self, ctx, x0, y, ts, key):
        """KL(theta_k) - KL(theta_{k+1}) at every timestep of ts [K] for every image of x0 [N] (labels y [N] or
        None): [N, K]. The N K rows are laid out image-major (the K rows of an image stay on the device that holds
        it)."""
        N, K = x0.shape[0], ts.shape[0]
        x0r, tr = jnp.repeat(x0, K, axis=0), jnp.tile(ts, N)
        yr = None if y is None else jnp.repeat(y, K, axis=0)
        kn_before, kn_after, kd_before, kd_after = jax.random.split(key, 4)
        if self.cfg.common_noise:
            kn_after, kd_after = kn_before, kd_before

        def kl(params, k_noise, k_dropout):
            noise = jax.random.normal(k_noise, x0r.shape, jnp.float32)
            dropout_key = k_dropout if self.cfg.probe_dropout else None
            terms = ctx.rows_fn(
                params,
                x0r,
                tr,
                noise,
                y=yr,
                dropout_key=dropout_key,
                kl_only=self.reward_kind == "bound",
                loss=self.reward_kind == "loss",
                rows_per_device=self.cfg.probe_chunk_rows,
            )
            return terms.reshape(N, K)

        delta = kl(ctx.params_before, kn_before, kd_before) - kl(ctx.params_after, kn_after, kd_after)
        return delta * self.reward_scale

    def _policy_loss(self, params, x0, u, advantage, from_policy):
        a, b = self.policy.apply(params, x0)
        logp = beta_log_prob(u, a, b)
        ent = beta_entropy(a, b)
        c = self.cfg.entropy_coef
        mask = from_policy.astype(jnp.float32)
        mean_masked = lambda v: jnp.sum(v * mask) / jnp.maximum(jnp.sum(mask), 1.0)
        if self.cfg.entropy_form == "reference":
            return -mean_masked(logp * (advantage + c * ent))
        return -mean_masked(logp * advantage) - c * jnp.mean(ent)

    def _baseline(self, state):
        """The bias-corrected running mean of the mean reward over the previous updates (0 before any, or off)."""
        decay, n = self.cfg.reward_baseline, state["updates"]
        if decay == 0:
            return jnp.zeros((), jnp.float32)
        return jnp.where(n > 0, state["baseline"] / (1.0 - decay ** n.astype(jnp.float32)), 0.0)

    def _select(self, X, y, count, S):
        """(S, F-scores of S): the num_selected grid timesteps with the highest F over the valid rows (filled and
        not all zero), once there are select_min_rows of them; else S unchanged."""
        filled = jnp.arange(self.cfg.buffer_size) < jnp.minimum(count, self.cfg.buffer_size)
        valid = filled & jnp.any(X != 0.0, axis=1)
        f = f_statistic(X, y, valid)
        idx = top_k_highest(f, self.cfg.num_selected)
        ready = jnp.sum(valid) >= self.cfg.select_min_rows
        return jnp.where(ready, self.grid[idx], S), jnp.where(ready, f[idx], 0.0)

    def _policy_update(self, state, ctx):
        k_probe, k_sweep, k_pick = jax.random.split(ctx.key, 3)
        xp = self._probe_rows(ctx.x0)
        up = self._probe_rows(ctx.aux["u"])
        from_policy = self._probe_rows(ctx.aux.get("from_policy", jnp.ones(ctx.x0.shape[:1], bool)))
        yp = None if ctx.y is None else self._probe_rows(ctx.y)
        delta = self._delta(ctx, xp, yp, state["S"], k_probe)  # [P, |S|]
        reward = jnp.sum(delta, axis=1)  # [P]
        advantage = jax.lax.stop_gradient(reward - self._baseline(state))

        loss, grads = jax.value_and_grad(self._policy_loss)(state["policy"], xp, up, advantage, from_policy)
        updates, opt = self.tx.update(grads, state["opt"], state["policy"])
        policy = optax.apply_updates(state["policy"], updates)

        pick = jax.random.choice(k_pick, ctx.x0.shape[0], (self.cfg.sweep_images,), replace=False)
        y_pick = None if ctx.y is None else ctx.y[pick]
        d = jnp.mean(self._delta(ctx, ctx.x0[pick], y_pick, self.grid, k_sweep), axis=0)  # [K]
        row = state["count"] % self.cfg.buffer_size
        X = state["X"].at[row].set(d)
        y = state["y"].at[row].set(jnp.sum(d))
        count = state["count"] + 1
        S, f_top = self._select(X, y, count, state["S"])
        decay = self.cfg.reward_baseline
        mass = bins_mass(ctx.aux["alpha"], ctx.aux["beta"], self.time.unit_edges(self.cfg.density_bins))
        density = jnp.mean(mass, axis=0)
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
            baseline=decay * state["baseline"] + (1.0 - decay) * jnp.mean(reward),
            reward_per_s=jnp.mean(delta, axis=0),
            f_top=f_top,
            density=density,
            # how much the images' distributions differ: sum over bins of the std across images of p(bin), relative
            # to the mean distribution's total mass (0: every image gets the same distribution)
            spread=jnp.sum(jnp.std(mass, axis=0)) / jnp.maximum(jnp.sum(density), 1e-12),
        )

    def period(self):
        return self.cfg.update_every

    def update(self, state, ctx):
        state = self.on_period(state, ctx, lambda s: self._policy_update(s, ctx))
        metrics = dict(
            alpha_mean=jnp.mean(ctx.aux["alpha"]),
            beta_mean=jnp.mean(ctx.aux["beta"]),
            reward_mean=state["reward"],
            policy_loss=state["policy_loss"],
            updates=state["updates"],
            S=state["S"],
            reward_per_s=state["reward_per_s"],
            f_top=state["f_top"],
            policy_density=state["density"],
            policy_spread=state["spread"],
        )
        return state, metrics
