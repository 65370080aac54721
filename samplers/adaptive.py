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
training objective w(t) MSE at S (plus a learned variance's term). The default, "bound", is the paper's objective;
in continuous time it measured better than "loss"
(docs/benchmarks/first_runs.md#flow-matching-on-the-digits-2026-12-01).

Tokens (the masked process, diffusion/masked.py): the policy reads the clean sequence (samplers/policy.py's token
trunk); the bound's rows are the masked NELBO's integrand per unit of t (Masked.row_terms, bits per token), so the
"bound" reward is the reduction of the NELBO's per-t terms at S, times 1 / grid as in any continuous time.
"""

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import betainc

from config.fields import Bool, Choice, FieldError, Int, Ints, Num
from config.registry import DISCRETE, FIXED_SCHEDULE, INVERTIBLE, LIKELIHOOD, Need
from samplers import policy_diagnostics
from samplers.base import SAMPLERS, Sampler
from samplers.policy import BetaPolicy, beta_entropy, beta_log_prob, bins_mass, sample_u
from samplers.policy_reward import bound_reduction, credit
from samplers.policy_state import PolicyState
from samplers.policy_update import (
    ENTROPY_FORMS,
    baseline_mean,
    entropy_coef_step,
    probe_rows,
    reinforce_loss,
    running_advantage,
    select_by_fstat,
    trust_region,
)

GRIDS = ("even", "geometric")
REWARDS = ("bound", "loss", "credit")
SELECTIONS = ("fstat", "fstat_standardised", "stratified")
DATA_ENDS = ("kl", "decoder", "exclude")
ADVANTAGES = ("raw", "normalised")
ENTROPY_CONTROLS = ("fixed", "target")
MIN_BIN_MASS = 1e-3  # importance weights use max(p(t), MIN_BIN_MASS / T): at most 1000


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
        # The changes below keep a step close to a uniform step, amortised over f_S, on the digits' small model
        # (docs/benchmarks/speed.md#the-learned-samplers-own-settings); configs/cifar10.py keeps the reference probe.
        # Sweep every 20th timestep (reference: all T): the sweep is most of an update's cost; S is then chosen among
        # the timesteps 0, 20, 40, ... ("even"), or among as many geometrically spaced ones ("geometric")
        sweep_stride=Int(20, 1, "T"),
        sweep_grid=Choice("even", GRIDS),
        sweep_images=Int(1, 1, "B"),  # images whose sweeps are averaged (reference: 1)
        # Images probed for the reward, spread evenly over the batch (reference: -1, the whole batch); a multiple of
        # the data axis's device count, so that every device probes as many
        probe_batch_size=Int(32, 1, extra=(-1,)),
        # The reference draws fresh noise after the update; the same noise and dropout masks before and after it
        # remove the noise's own variance from the reward without biasing it (common random numbers).
        common_noise=Bool(True),
        probe_dropout=Bool(True),  # probe in train mode, dropout on (reference)
        # Probes and sweep run the network on at most this many rows per device at a time (0: all at once), each
        # chunk with dropout masks of its own (not in the reference): XLA sizes the update's scratch memory by it.
        probe_chunk_rows=Int(16, 0),
        # A quarter of the reference policy's width (32, 64, 128 / 256, 256): its forward pass runs on every step,
        # where at full width it is a visible share of the digits' small UNet's step.
        policy_channels=Ints((8, 16, 32), 1, allow_empty=True),
        policy_hidden=Ints((64, 64), 1, allow_empty=True),
        # bins of t for the diagnostics of the policy's density (sampler/policy_density in metrics.jsonl)
        density_bins=Int(50, 1, "T"),
        # what the reward is the reduction of at S: the bound's terms, or the training loss (module docstring); or
        # "credit": per image the first-order reduction of the bound at the strata S by a step on that image's own
        # training example, <grad l_i(t_i), grad B_S> (docs/method.md#making-the-policy-learn)
        reward=Choice("bound", REWARDS),
        # -- making the policy learn (docs/method.md#making-the-policy-learn); each default is the behaviour above --
        # how S is chosen: "fstat" (reference) the F-statistic of y = the sweep row's sum on each column;
        # "fstat_standardised" the same against y = the sum of the columns standardised over the buffer's valid rows
        # (no one noisy column makes y); "stratified" no sweep: each update one fresh time drawn uniformly in each of
        # |S| equal strata of the time domain, R = sum_k (stratum k's cells) d(t_k), unbiased for the whole bound's
        # reduction
        selection=Choice("fstat", SELECTIONS),
        # the data end (t = 0 on the chain, the first grid cell in continuous time): "kl" as any other term (the
        # reference's Gaussian KL at t = 0 on the chain); "decoder" the bound's own t = 0 term on the chain, the
        # discretised decoder; "exclude" never in S, in the F target or in the strata
        data_end=Choice("kl", DATA_ENDS),
        # "raw": A = R (minus reward_baseline's running mean); "normalised": A = (R - m) / s, m and s the mean and
        # spread of the running mixture of the per-image rewards of all updates, weight advantage_decay per update
        # (the first update's own), so that entropy_coef means the same on every data set, model and process
        advantage=Choice("raw", ADVANTAGES),
        advantage_decay=Num(0.9, 0.0, 1.0, hi_open=True),
        # "fixed": entropy_coef as given; "target": the coefficient (starting at entropy_coef) tuned every update as
        # SAC tunes its temperature, log c <- log c - entropy_coef_lr (H - entropy_target), H the probe images' mean
        # entropy: it rises while the policy is further from uniform than the target. A Beta on [0, 1] has
        # entropy -KL(pi || uniform), so the target is minus a KL from uniform (nats)
        entropy_control=Choice("fixed", ENTROPY_CONTROLS),
        entropy_target=Num(-0.1, hi=0.0, hi_open=True),
        entropy_coef_lr=Num(0.5, 0.0, lo_open=True),
        # a trust region per policy update: the probe images' mean KL(pi_old || pi_new) at most trust_kl (nats), the
        # step scaled by sqrt(trust_kl / KL) and then halved until it holds (0: off)
        trust_kl=Num(0.0, 0.0),
        # log, per update, the reward's spread and variance share per s, the rewards per image and the policy
        # gradient's signal-to-noise ratio per layer (benchmarks/reward.py)
        diagnostics=Bool(False),
    )

    @classmethod
    def needs(cls, cfg):
        out = super().needs(cfg)
        reward = cfg.reward
        if reward != "loss":  # the bound's rows (diffusion.base.Likelihood.row_terms)
            out.append(Need(LIKELIHOOD, "reward", reward, "loss", "its reward reads the bound's terms"))
        if cfg.sweep_grid == "geometric":  # spaced in log SNR: mapped back to times
            out.append(Need(INVERTIBLE, "sweep_grid", "geometric", "even"))
        if cfg.data_end == "decoder":
            why = "the discretised decoder is the t = 0 term of a chain's bound; continuous time has no such term"
            out.append(Need(DISCRETE, "data_end", "decoder", "kl or exclude", why))
        if not cfg.importance_weights:
            why = (
                "the schedule's interior descends the bound only where t is uniform or importance-weighted (without "
                "the weights it learns to move log SNR away from where the policy samples)"
            )
            out.append(Need(FIXED_SCHEDULE, "importance_weights", False, "True", why))
        return out

    @classmethod
    def check(cls, cfg, ctx):
        T, B = ctx["T"], ctx["B"]
        K = len(range(0, T, cfg.sweep_stride))

        def refuse(field, why):
            raise FieldError(field, getattr(cfg, field), why)

        if not cfg.num_selected <= K:
            why = f"|S| must be in 1..{K}: at most T={T} and at most the {K} timesteps of the sweep grid"
            refuse("num_selected", f"{why} (stride {cfg.sweep_stride})")
        if cfg.data_end == "exclude" and not cfg.num_selected <= K - 1:
            why = f"must be at most {K - 1} with data_end=exclude: the sweep grid's {K} times less the data end"
            refuse("num_selected", why)
        if cfg.reward == "credit" and cfg.selection != "stratified":
            why = "must be stratified with reward=credit: the bound's gradient is taken at fresh strata every update"
            refuse("selection", why)
        if cfg.advantage == "normalised" and cfg.reward_baseline > 0:
            why = "must be 0 with advantage=normalised, which subtracts its own running mean of the reward"
            refuse("reward_baseline", why)
        if cfg.entropy_control == "target" and cfg.entropy_coef == 0:
            why = "must be > 0 with entropy_control=target: it is the coefficient's starting value, tuned in log space"
            refuse("entropy_coef", why)
        if cfg.select_min_rows > cfg.buffer_size:
            refuse("select_min_rows", f"must be at most buffer_size={cfg.buffer_size}")
        probe = B if cfg.probe_batch_size == -1 else cfg.probe_batch_size
        if not (probe <= B and B % probe == 0):
            why = f"must be -1 (the whole batch) or a divisor of config.train.batch_size={B} (at most the batch)"
            refuse("probe_batch_size", why)
        D = ctx.values.get("D", (1,))[0]  # the data axis's devices, when they are known
        if probe % D:
            why = f"must be a multiple of the {D} devices of the data axis (every device probes as many images)"
            refuse("probe_batch_size", why)

    def __init__(self, cfg, process, batch_size):
        super().__init__(cfg, process, batch_size)
        self.policy = BetaPolicy(tuple(cfg.policy_channels), tuple(cfg.policy_hidden), vocab=process.vocab_size)
        self.tx = optax.chain(
            optax.clip_by_global_norm(cfg.policy_grad_clip),
            optax.adam(cfg.policy_lr, b1=cfg.policy_b1, b2=cfg.policy_b2),
        )
        self.grid = self.time.sweep(process, cfg.sweep_stride, cfg.sweep_grid)
        # one grid cell's share of the bound (1 on the chain: a step's KL; 1 / grid in continuous time, where the
        # ELBO integrand is per unit of t), so that entropy_coef and policy_grad_clip mean the same in both domains
        self.reward_scale = self.time.cell_share if self.cfg.reward in ("bound", "credit") else 1.0
        self.probe = batch_size if cfg.probe_batch_size == -1 else cfg.probe_batch_size
        # what the probe rows compute (training/step.py ROW_KINDS): the training objective for reward=loss; else the
        # bound's terms, with the chain's t = 0 term the reference's Gaussian KL or the bound's own decoder
        self.row_kind = "loss" if self.cfg.reward == "loss" else "bound" if self.cfg.data_end == "decoder" else "kl"
        self.skip = int(self.cfg.data_end == "exclude")  # grid times (the data end) S never holds
        self.selectable = jnp.arange(self.grid.shape[0]) >= self.skip

    def init(self, key, x0):
        params = self.policy.init(key, x0[:1])
        K, n = int(self.grid.shape[0]), self.cfg.num_selected
        zero = jnp.zeros((), jnp.float32)
        # each option's state only when it is on: a checkpoint of the default sampler keeps its layout
        extra = {}
        if self.cfg.advantage == "normalised":
            extra.update(adv_mean=zero, adv_var=zero)  # the running mixture of the rewards
        if self.cfg.entropy_control == "target":
            extra.update(log_coef=jnp.log(jnp.float32(self.cfg.entropy_coef)), entropy=zero)
        if self.cfg.trust_kl > 0:
            extra.update(step_kl=zero, step_scale=jnp.ones((), jnp.float32))
        if self.cfg.diagnostics:
            extra.update(diag=policy_diagnostics.initial(params, n, self.probe))
        return PolicyState(
            policy=params,
            opt=self.tx.init(params),
            sweep_rows=jnp.zeros((self.cfg.buffer_size, K), jnp.float32),
            sweep_totals=jnp.zeros((self.cfg.buffer_size,), jnp.float32),
            sweep_count=jnp.zeros((), jnp.int32),
            # the reference's initial S = {0, 1, 2}; in continuous time the first grid times (after the data end
            # with data_end=exclude)
            probe_times=self.time.first(self.grid, n, self.skip),
            updates=jnp.zeros((), jnp.int32),
            reward=zero,
            policy_loss=zero,
            baseline=zero,  # the running mean of the mean reward, before bias correction
            reward_per_s=jnp.zeros((n,), jnp.float32),
            f_top=jnp.zeros((n,), jnp.float32),
            density=jnp.zeros((self.cfg.density_bins,), jnp.float32),
            spread=zero,
            **extra,
        )

    def sample(self, state, key, x0):
        a, b = self.policy.apply(state.policy, x0)
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
    def _delta(self, ctx, x0, y, ts, key):
        """The bound's (or the loss's) reduction by this step's update at ts [K] for every image of x0: [N, K]."""
        cfg = self.cfg
        return bound_reduction(
            ctx, x0, y, ts, key, kind=self.row_kind, scale=self.reward_scale, common_noise=cfg.common_noise,
            dropout=cfg.probe_dropout, chunk=cfg.probe_chunk_rows, draw_noise=self.process.draw_noise,
        )  # fmt: skip

    def _credit(self, ctx, x0, y, t, ts, key):
        """Each probe image's first-order credit for the bound's reduction at ts [K]: [N, K]."""
        kind = "bound" if self.cfg.data_end == "decoder" else "kl"
        return credit(
            ctx, x0, y, t, ts, key, kind=kind, scale=self.reward_scale, dropout=self.cfg.probe_dropout,
            chunk=self.cfg.probe_chunk_rows, draw_noise=self.process.draw_noise,
        )  # fmt: skip

    def _policy_loss(self, params, x0, u, advantage, from_policy, c):
        """The REINFORCE loss with entropy coefficient c, and the probe images' mean entropy."""
        a, b = self.policy.apply(params, x0)
        logp = beta_log_prob(u, a, b)  # traced before the entropy: the order keeps runs bit-identical
        ent = beta_entropy(a, b)
        return reinforce_loss(logp, ent, advantage, from_policy, c, self.cfg.entropy_form), jnp.mean(ent)

    def _advantage(self, state, reward):
        """(A [P], the state's updated running statistics): the advantage of each probe image's reward."""
        if self.cfg.advantage == "raw":
            return reward - baseline_mean(state.baseline, state.updates, self.cfg.reward_baseline), {}
        A, m, v = running_advantage(reward, state.updates, state.adv_mean, state.adv_var, self.cfg.advantage_decay)
        return A, dict(adv_mean=m, adv_var=v)

    def _probe_times(self, state, key):
        """(S [|S|], each time's weight in cells): the previous update's selection with weight 1, or fresh strata."""
        if self.cfg.selection == "stratified":
            return self.time.strata(key, self.cfg.num_selected, self.skip)
        return state.probe_times, jnp.ones((self.cfg.num_selected,), jnp.float32)

    def select(self, X, y, count, S):
        """(S, F-scores of S) from the sweep buffer X [buffer, K] with row sums y (policy_update.select_by_fstat)."""
        return select_by_fstat(
            X, y, count, S, grid=self.grid, selectable=self.selectable, num_selected=self.cfg.num_selected,
            min_rows=self.cfg.select_min_rows, standardised=self.cfg.selection == "fstat_standardised", skip=self.skip,
        )  # fmt: skip

    def _policy_update(self, state, ctx):
        k_probe, k_sweep, k_pick = jax.random.split(ctx.key, 3)
        xp = probe_rows(ctx.x0, self.probe)
        up = probe_rows(ctx.aux["u"], self.probe)
        from_policy = probe_rows(ctx.aux.get("from_policy", jnp.ones(ctx.x0.shape[:1], bool)), self.probe)
        yp = None if ctx.y is None else probe_rows(ctx.y, self.probe)
        # the strata's draw takes a key of its own, so that the default's k_probe stream is unchanged
        S_used, cells = self._probe_times(state, jax.random.fold_in(ctx.key, 3))
        if self.cfg.reward == "credit":
            tp = probe_rows(ctx.t, self.probe)
            delta = self._credit(ctx, xp, yp, tp, S_used, k_probe) * cells  # [P, |S|]
        else:
            delta = self._delta(ctx, xp, yp, S_used, k_probe) * cells  # [P, |S|]
        reward = jnp.sum(delta, axis=1)  # [P]
        advantage, new = self._advantage(state, reward)
        advantage = jax.lax.stop_gradient(advantage)

        c = jnp.exp(state.log_coef) if self.cfg.entropy_control == "target" else self.cfg.entropy_coef
        (loss, entropy), grads = jax.value_and_grad(self._policy_loss, has_aux=True)(
            state.policy, xp, up, advantage, from_policy, c
        )
        updates, opt = self.tx.update(grads, state.opt, state.policy)
        policy = optax.apply_updates(state.policy, updates)
        if self.cfg.trust_kl > 0:
            policy, new["step_kl"], new["step_scale"] = trust_region(
                self.policy.apply, state.policy, policy, xp, self.cfg.trust_kl
            )
        if self.cfg.entropy_control == "target":  # SAC's temperature rule, on log c, with this update's entropy
            log_c = entropy_coef_step(state.log_coef, self.cfg.entropy_coef_lr, entropy, self.cfg.entropy_target)
            new.update(log_coef=log_c, entropy=entropy)
        if self.cfg.diagnostics:
            new["diag"] = policy_diagnostics.measure(
                self.policy.apply, state.policy, xp, up, advantage, from_policy, c, delta
            )

        if self.cfg.selection == "stratified":  # no sweep, no buffer: S records this update's draw
            X, y, count = state.sweep_rows, state.sweep_totals, state.sweep_count + 1
            S, f_top = S_used, jnp.zeros_like(state.f_top)
        else:
            pick = jax.random.choice(k_pick, ctx.x0.shape[0], (self.cfg.sweep_images,), replace=False)
            y_pick = None if ctx.y is None else ctx.y[pick]
            d = jnp.mean(self._delta(ctx, ctx.x0[pick], y_pick, self.grid, k_sweep), axis=0)  # [K]
            row = state.sweep_count % self.cfg.buffer_size
            X = state.sweep_rows.at[row].set(d)
            y = state.sweep_totals.at[row].set(jnp.sum(d))
            count = state.sweep_count + 1
            S, f_top = self.select(X, y, count, state.probe_times)
        decay = self.cfg.reward_baseline
        mass = bins_mass(ctx.aux["alpha"], ctx.aux["beta"], self.time.unit_edges(self.cfg.density_bins))
        density = jnp.mean(mass, axis=0)
        return PolicyState(
            policy=policy,
            opt=opt,
            sweep_rows=X,
            sweep_totals=y,
            sweep_count=count,
            probe_times=S,
            updates=state.updates + 1,
            reward=jnp.mean(reward),
            policy_loss=loss,
            baseline=decay * state.baseline + (1.0 - decay) * jnp.mean(reward),
            reward_per_s=jnp.mean(delta, axis=0),
            f_top=f_top,
            density=density,
            # how much the images' distributions differ: sum over bins of the std across images of p(bin), relative
            # to the mean distribution's total mass (0: every image gets the same distribution)
            spread=jnp.sum(jnp.std(mass, axis=0)) / jnp.maximum(jnp.sum(density), 1e-12),
            **new,
        )

    def period(self):
        return self.cfg.update_every

    def update(self, state, ctx):
        state = self.on_period(state, ctx, lambda s: self._policy_update(s, ctx))
        metrics = dict(
            alpha_mean=jnp.mean(ctx.aux["alpha"]),
            beta_mean=jnp.mean(ctx.aux["beta"]),
            reward_mean=state.reward,
            policy_loss=state.policy_loss,
            updates=state.updates,
            S=state.probe_times,
            reward_per_s=state.reward_per_s,
            f_top=state.f_top,
            policy_density=state.density,
            policy_spread=state.spread,
        )
        if self.cfg.entropy_control == "target":
            metrics.update(entropy_coef=jnp.exp(state.log_coef), entropy=state.entropy)
        if self.cfg.trust_kl > 0:
            metrics.update(step_kl=state.step_kl, step_scale=state.step_scale)
        if self.cfg.advantage == "normalised":
            metrics.update(reward_running_mean=state.adv_mean, reward_running_sd=jnp.sqrt(state.adv_var))
        if self.cfg.diagnostics:
            metrics.update(state.diag)
        return state, metrics
