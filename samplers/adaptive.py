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

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import betainc

from config.fields import Bool, Choice, ConfigError, FieldError, Int, Ints, Num
from config.registry import DISCRETE, FIXED_SCHEDULE, INVERTIBLE, LIKELIHOOD, Need
from diffusion.time import continuous_grid, sweep_grid  # noqa: F401 (the sweep grids, importable from here)
from samplers.base import SAMPLERS, Sampler
from samplers.fstat import f_statistic, top_k_highest
from samplers.policy import BetaPolicy, beta_entropy, beta_kl, beta_log_prob, sample_u


@flax.struct.dataclass(kw_only=True)
class PolicyState:
    """The learned sampler's state (a pytree; in the train state's sampler_state). An option's fields are None when
    the option is off, so a checkpoint holds only what the run uses. The fields are declared in the sorted order of
    the dict keys this state had before it was a dataclass (LEGACY_NAMES), so its leaves come in the same order and
    the step compiles to the same program; a checkpoint written with those keys still restores
    (training/checkpoint.py restore, from_legacy)."""

    probe_times: jax.Array  # S [|S|]: the grid indices probed at the next update
    sweep_rows: jax.Array  # X [buffer, K]: ring buffer of the sweep's per-grid-time reductions d_tau
    adv_mean: jax.Array | None = None  # advantage=normalised: the running mixture's mean and variance of the reward
    adv_var: jax.Array | None = None
    baseline: jax.Array  # the running mean of the mean reward (reward_baseline), before bias correction
    sweep_count: jax.Array  # count: sweeps pushed into the ring buffer so far
    density: jax.Array  # [density_bins]: the policy's mean mass per bin of u at the last update
    diag: dict | None = None  # diagnostics=True: what the reward and the policy gradient carry (_diagnostics)
    entropy: jax.Array | None = None  # entropy_control=target: the policy's mean entropy at the last update
    f_top: jax.Array  # [|S|]: the F-statistics of the selected grid times
    log_coef: jax.Array | None = None  # entropy_control=target: log of the entropy coefficient
    opt: object  # the policy optimizer's state
    policy: dict  # the policy network's variables
    policy_loss: jax.Array
    reward: jax.Array  # the mean reward of the last update (bits/dim)
    reward_per_s: jax.Array  # [|S|]: its mean over probe images per probed time
    spread: jax.Array  # how much the images' distributions differ (_policy_update)
    step_kl: jax.Array | None = None  # trust_kl: the KL between the last two policies and the step's scale
    step_scale: jax.Array | None = None
    updates: jax.Array  # policy updates so far
    sweep_totals: jax.Array  # y [buffer]: sum_tau d_tau of each buffer row

    # the keys of the dict this state was before (checkpoints written until 2026-12-05): field -> key
    LEGACY_NAMES = dict(probe_times="S", sweep_rows="X", sweep_count="count", sweep_totals="y")

    def to_legacy(self) -> dict:
        """The state as the dict of the old layout (absent options left out): a restore target for old checkpoints."""
        return {
            self.LEGACY_NAMES.get(f.name, f.name): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    @classmethod
    def from_legacy(cls, d: dict) -> "PolicyState":
        back = {v: k for k, v in cls.LEGACY_NAMES.items()}
        return cls(**{back.get(k, k): v for k, v in d.items()})

    @classmethod
    def is_legacy(cls, paths) -> bool:
        """Whether a checkpoint's sampler_state leaf paths ("sampler_state.X", ...) are of the old layout."""
        return any(p == "sampler_state.X" or p.startswith("sampler_state.X.") for p in paths)


ENTROPY_FORMS = ("standard", "reference")
GRIDS = ("even", "geometric")
REWARDS = ("bound", "loss", "credit")
SELECTIONS = ("fstat", "fstat_standardised", "stratified")
DATA_ENDS = ("kl", "decoder", "exclude")
ADVANTAGES = ("raw", "normalised")
ENTROPY_CONTROLS = ("fixed", "target")
# the automatically tuned entropy coefficient stays in [1e-6, 10] (entropy_control="target")
LOG_COEF_RANGE = (float(np.log(1e-6)), float(np.log(10.0)))
TRUST_HALVINGS = 10  # at most this many halvings of a policy step after its first scaling (trust_kl)
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
        reward = cfg.get("reward", "bound")
        if reward != "loss":  # the bound's rows (diffusion.base.Likelihood.row_terms)
            out.append(Need(LIKELIHOOD, "reward", reward, "loss", "its reward reads the bound's terms"))
        if cfg.sweep_grid == "geometric":  # spaced in log SNR: mapped back to times
            out.append(Need(INVERTIBLE, "sweep_grid", "geometric", "even"))
        if cfg.get("data_end", "kl") == "decoder":
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
        if ctx["vocab_size"]:  # tokens [B, L]: the policy (samplers/policy.py) is a conv net on images
            raise ConfigError(
                f"config.sampler.name='adaptive' is not allowed with config.data.name={ctx['data_name']!r}: its policy "
                "network reads images and the data are tokens; use uniform or antithetic"
            )
        T, B = ctx["T"], ctx["B"]
        K = len(range(0, T, cfg.sweep_stride))
        if not cfg.num_selected <= K:
            raise FieldError(
                "num_selected",
                cfg.num_selected,
                f"|S| must be in 1..{K}: at most T={T} and at most the {K} timesteps of the sweep grid "
                f"(stride {cfg.sweep_stride})",
            )
        skip = int(cfg.data_end == "exclude")
        if cfg.data_end == "exclude" and not cfg.num_selected <= K - skip:
            raise FieldError(
                "num_selected",
                cfg.num_selected,
                f"must be at most {K - 1} with data_end=exclude: the sweep grid's {K} times less the data end",
            )
        if cfg.reward == "credit" and cfg.selection != "stratified":
            raise FieldError(
                "selection",
                cfg.selection,
                "must be stratified with reward=credit: the bound's gradient is taken at fresh strata every update",
            )
        if cfg.advantage == "normalised" and cfg.reward_baseline > 0:
            raise FieldError(
                "reward_baseline",
                cfg.reward_baseline,
                "must be 0 with advantage=normalised, which subtracts its own running mean of the reward",
            )
        if cfg.entropy_control == "target" and cfg.entropy_coef == 0:
            raise FieldError(
                "entropy_coef",
                cfg.entropy_coef,
                "must be > 0 with entropy_control=target: it is the coefficient's starting value, tuned in log space",
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
        self.reward_scale = self.time.cell_share if self.reward_kind in ("bound", "credit") else 1.0
        self.probe = batch_size if cfg.probe_batch_size == -1 else cfg.probe_batch_size
        # the options of docs/method.md#making-the-policy-learn (a sub-config written before them has none)
        opt = lambda k: cfg.get(k, self.FIELDS[k].default)
        self.selection, self.data_end, self.advantage = opt("selection"), opt("data_end"), opt("advantage")
        self.advantage_decay, self.trust_kl = opt("advantage_decay"), opt("trust_kl")
        # what the probe rows compute (training/step.py ROW_KINDS): the training objective for reward=loss; else the
        # bound's terms, with the chain's t = 0 term the reference's Gaussian KL or the bound's own decoder
        self.row_kind = "loss" if self.reward_kind == "loss" else "bound" if self.data_end == "decoder" else "kl"
        self.entropy_control, self.entropy_target = opt("entropy_control"), opt("entropy_target")
        self.entropy_coef_lr, self.diagnostics = opt("entropy_coef_lr"), opt("diagnostics")
        self.skip = int(self.data_end == "exclude")  # grid times (the data end) S never holds
        self.selectable = jnp.arange(self.grid.shape[0]) >= self.skip

    def init(self, key, x0):
        params = self.policy.init(key, x0[:1])
        K, n = int(self.grid.shape[0]), self.cfg.num_selected
        zero = jnp.zeros((), jnp.float32)
        # each option's state only when it is on: a checkpoint of the default sampler keeps its layout
        extra = {}
        if self.advantage == "normalised":
            extra.update(adv_mean=zero, adv_var=zero)  # the running mixture of the rewards
        if self.entropy_control == "target":
            extra.update(log_coef=jnp.log(jnp.float32(self.cfg.entropy_coef)), entropy=zero)
        if self.trust_kl > 0:
            extra.update(step_kl=zero, step_scale=jnp.ones((), jnp.float32))
        if self.diagnostics:
            extra.update(diag=self._diag_init(params, n))
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
            noise = self.process.draw_noise(k_noise, x0r)
            dropout_key = k_dropout if self.cfg.probe_dropout else None
            terms = ctx.rows_fn(
                params,
                x0r,
                tr,
                noise,
                y=yr,
                dropout_key=dropout_key,
                kind=self.row_kind,
                rows_per_device=self.cfg.probe_chunk_rows,
            )
            return terms.reshape(N, K)

        delta = kl(ctx.params_before, kn_before, kd_before) - kl(ctx.params_after, kn_after, kd_after)
        return delta * self.reward_scale

    def _credit(self, ctx, x0, y, t, ts, key):
        """<grad l_i(theta_k; t_i), grad KL_s(theta_k)> for every probe image i [N] (drawn at t [N] this step) and
        every s of ts [K]: [N, K]. KL_s is the bound's term at s, averaged over the N images (their own noise); l_i
        is image i's training objective w(t_i) MSE (+ extra) with fresh noise, without the sampler's importance
        weight. A step theta - eta grad l_i lowers KL_s by eta times this, to first order (Adam's preconditioning
        left out): the share of the bound's reduction owed to image i's own draw. One gradient per s, one
        forward-mode pass over the images each."""
        N, K = x0.shape[0], ts.shape[0]
        k_rows, k_drop, k_loss, k_loss_drop = jax.random.split(key, 4)
        dropout = k_drop if self.cfg.probe_dropout else None
        kind = "bound" if self.data_end == "decoder" else "kl"
        params = ctx.params_before

        def term(p, s):  # the mean over the images of the bound's term at ts[s] (one grid cell's share)
            noise = self.process.draw_noise(jax.random.fold_in(k_rows, s), x0)
            tr = jnp.full((N,), ts[s], ts.dtype)
            rows = ctx.rows_fn(
                p, x0, tr, noise, kind=kind, y=y, dropout_key=dropout, rows_per_device=self.cfg.probe_chunk_rows
            )
            return jnp.mean(rows) * self.reward_scale

        loss_noise = self.process.draw_noise(k_loss, x0)
        loss_dropout = k_loss_drop if self.cfg.probe_dropout else None
        losses = lambda p: ctx.objective(p, x0, t, loss_noise, loss_dropout, y)[0]
        cols = [jax.jvp(losses, (params,), (jax.grad(term)(params, s),))[1] for s in range(K)]
        return jnp.stack(cols, axis=1)

    def _policy_loss(self, params, x0, u, advantage, from_policy, c):
        """The REINFORCE loss with entropy coefficient c, and the probe images' mean entropy."""
        a, b = self.policy.apply(params, x0)
        logp = beta_log_prob(u, a, b)
        ent = beta_entropy(a, b)
        mask = from_policy.astype(jnp.float32)
        mean_masked = lambda v: jnp.sum(v * mask) / jnp.maximum(jnp.sum(mask), 1.0)
        if self.cfg.entropy_form == "reference":
            return -mean_masked(logp * (advantage + c * ent)), jnp.mean(ent)
        return -mean_masked(logp * advantage) - c * jnp.mean(ent), jnp.mean(ent)

    def _entropy_coef(self, state):
        return jnp.exp(state.log_coef) if self.entropy_control == "target" else self.cfg.entropy_coef

    def _advantage(self, state, reward):
        """(A [P], the state's updated running statistics): the advantage of each probe image's reward."""
        if self.advantage == "raw":
            return reward - self._baseline(state), {}
        # the running mixture: weight d for the rewards of earlier updates (mean m, variance v), 1 - d for this
        # update's (mean bm, variance bv); the first update's are its own
        d, first = self.advantage_decay, state.updates == 0
        bm, bv = jnp.mean(reward), jnp.var(reward)
        m = jnp.where(first, bm, d * state.adv_mean + (1 - d) * bm)
        v = jnp.where(first, bv, d * state.adv_var + (1 - d) * bv + d * (1 - d) * (bm - state.adv_mean) ** 2)
        return (reward - m) / jnp.maximum(jnp.sqrt(v), 1e-12), dict(adv_mean=m, adv_var=v)

    def _trust_region(self, old, new, x0):
        """new scaled towards old so that the probe images' mean KL(pi_old || pi_new) <= trust_kl: first by
        sqrt(trust_kl / KL) (the KL of a small step is quadratic in its length), then halved until it holds.
        Returns (params, KL, scale)."""
        a0, b0 = self.policy.apply(old, x0)
        step = jax.tree.map(lambda n, o: n - o, new, old)
        at = lambda s: jax.tree.map(lambda o, d: o + s * d, old, step)

        def kl(s):
            a, b = self.policy.apply(at(s), x0)
            return jnp.mean(beta_kl(a0, b0, a, b))

        full = kl(1.0)
        scale = jnp.where(full > self.trust_kl, jnp.sqrt(self.trust_kl / jnp.maximum(full, 1e-30)), 1.0)

        def halve(carry):
            s, _, i = carry
            return s / 2, kl(s / 2), i + 1

        scale, value, _ = jax.lax.while_loop(
            lambda c: (c[1] > self.trust_kl) & (c[2] < TRUST_HALVINGS), halve, (scale, kl(scale), 0)
        )
        return at(scale), value, scale

    def _probe_times(self, state, key):
        """(S [|S|], each time's weight in cells): the previous update's selection with weight 1, or fresh strata."""
        if self.selection == "stratified":
            return self.time.strata(key, self.cfg.num_selected, self.skip)
        return state.probe_times, jnp.ones((self.cfg.num_selected,), jnp.float32)

    def _baseline(self, state):
        """The bias-corrected running mean of the mean reward over the previous updates (0 before any, or off)."""
        decay, n = self.cfg.reward_baseline, state.updates
        if decay == 0:
            return jnp.zeros((), jnp.float32)
        return jnp.where(n > 0, state.baseline / (1.0 - decay ** n.astype(jnp.float32)), 0.0)

    def _select(self, X, y, count, S):
        """(S, F-scores of S): the num_selected grid timesteps with the highest F over the valid rows (filled and
        not all zero), once there are select_min_rows of them; else S unchanged. The F target is y (the rows'
        sums), the sum of the selectable columns (data_end=exclude), or of the selectable columns standardised
        over the valid rows (fstat_standardised: a constant column counts 0)."""
        filled = jnp.arange(self.cfg.buffer_size) < jnp.minimum(count, self.cfg.buffer_size)
        valid = filled & jnp.any(X != 0.0, axis=1)
        keep = self.selectable.astype(X.dtype)
        if self.selection == "fstat_standardised":
            w = valid.astype(X.dtype)[:, None]
            n = jnp.maximum(jnp.sum(w), 1.0)
            mean = jnp.sum(X * w, 0) / n
            sd = jnp.sqrt(jnp.sum(((X - mean) * w) ** 2, 0) / n)
            z = jnp.where(sd > 0, (X - mean) / jnp.where(sd > 0, sd, 1.0), 0.0)
            y = jnp.sum(z * keep, axis=1)
        elif self.skip:
            y = jnp.sum(X * keep, axis=1)
        f = jnp.where(self.selectable, f_statistic(X, y, valid), -1.0)
        idx = top_k_highest(f, self.cfg.num_selected)
        ready = jnp.sum(valid) >= self.cfg.select_min_rows
        return jnp.where(ready, self.grid[idx], S), jnp.where(ready, f[idx], 0.0)

    def _policy_update(self, state, ctx):
        k_probe, k_sweep, k_pick = jax.random.split(ctx.key, 3)
        xp = self._probe_rows(ctx.x0)
        up = self._probe_rows(ctx.aux["u"])
        from_policy = self._probe_rows(ctx.aux.get("from_policy", jnp.ones(ctx.x0.shape[:1], bool)))
        yp = None if ctx.y is None else self._probe_rows(ctx.y)
        # the strata's draw takes a key of its own, so that the default's k_probe stream is unchanged
        S_used, cells = self._probe_times(state, jax.random.fold_in(ctx.key, 3))
        if self.reward_kind == "credit":
            tp = self._probe_rows(ctx.t)
            delta = self._credit(ctx, xp, yp, tp, S_used, k_probe) * cells  # [P, |S|]
        else:
            delta = self._delta(ctx, xp, yp, S_used, k_probe) * cells  # [P, |S|]
        reward = jnp.sum(delta, axis=1)  # [P]
        advantage, new = self._advantage(state, reward)
        advantage = jax.lax.stop_gradient(advantage)

        c = self._entropy_coef(state)
        (loss, entropy), grads = jax.value_and_grad(self._policy_loss, has_aux=True)(
            state.policy, xp, up, advantage, from_policy, c
        )
        updates, opt = self.tx.update(grads, state.opt, state.policy)
        policy = optax.apply_updates(state.policy, updates)
        if self.trust_kl > 0:
            policy, new["step_kl"], new["step_scale"] = self._trust_region(state.policy, policy, xp)
        if self.entropy_control == "target":  # SAC's temperature rule, on log c, with this update's entropy
            log_c = state.log_coef - self.entropy_coef_lr * (entropy - self.entropy_target)
            new.update(log_coef=jnp.clip(log_c, *LOG_COEF_RANGE), entropy=entropy)
        if self.diagnostics:
            new["diag"] = self._diagnostics(state.policy, xp, up, advantage, from_policy, c, delta)

        if self.selection == "stratified":  # no sweep, no buffer: S records this update's draw
            X, y, count, S, f_top = (
                state.sweep_rows,
                state.sweep_totals,
                state.sweep_count + 1,
                S_used,
                jnp.zeros_like(state.f_top),
            )
        else:
            pick = jax.random.choice(k_pick, ctx.x0.shape[0], (self.cfg.sweep_images,), replace=False)
            y_pick = None if ctx.y is None else ctx.y[pick]
            d = jnp.mean(self._delta(ctx, ctx.x0[pick], y_pick, self.grid, k_sweep), axis=0)  # [K]
            row = state.sweep_count % self.cfg.buffer_size
            X = state.sweep_rows.at[row].set(d)
            y = state.sweep_totals.at[row].set(jnp.sum(d))
            count = state.sweep_count + 1
            S, f_top = self._select(X, y, count, state.probe_times)
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

    # -- diagnostics (diagnostics=True; benchmarks/reward.py) ---------------------------------------------------
    def _groups(self, params):
        """The policy's layers (its top-level modules), in a fixed order."""
        return sorted(params["params"])

    def _diag_init(self, params, n):
        zero = jnp.zeros((), jnp.float32)
        G = len(self._groups(params))
        return dict(
            reward_sd_per_s=jnp.zeros((n,), jnp.float32),
            reward_share_per_s=jnp.zeros((n,), jnp.float32),
            reward_per_image=jnp.zeros((self.probe,), jnp.float32),
            grad_snr=jnp.zeros((G,), jnp.float32),
            entropy_to_reward_grad=zero,
        )

    def _diagnostics(self, params, xp, up, advantage, from_policy, c, delta):
        """What the reward and the policy gradient carry at this update (before the policy step):
        - reward_sd_per_s [|S|]: the spread across probe images of each s's term of R_i;
        - reward_share_per_s [|S|]: Cov(d_s, R) / Var(R), each s's share of the reward's variance across images
          (the shares sum to 1);
        - reward_per_image [P]: R_i;
        - grad_snr [layers]: per layer, |mean_i g_i| / sqrt(mean_i |g_i - mean g|^2), g_i = -A_i grad log pi(u_i | x_i)
          image i's REINFORCE term (0 for uniformly drawn images): the mean's length over the per-image spread (a
          mean of P images is distinguishable from 0 when this exceeds about 2 / sqrt(P));
        - entropy_to_reward_grad: |c grad mean_i H_i| / |mean_i g_i| over all parameters."""
        R = jnp.sum(delta, axis=1)
        Rc, dc = R - jnp.mean(R), delta - jnp.mean(delta, axis=0)
        share = jnp.mean(dc * Rc[:, None], axis=0) / jnp.maximum(jnp.mean(Rc**2), 1e-30)

        def logp(p, x, u):
            a, b = self.policy.apply(p, x[None])
            return beta_log_prob(u, a[0], b[0])

        g = jax.vmap(jax.grad(logp), in_axes=(None, 0, 0))(params, xp, up)
        weight = -advantage * from_policy.astype(jnp.float32)
        g = jax.tree.map(lambda v: v * weight.reshape((-1,) + (1,) * (v.ndim - 1)), g)

        def snr(tree):
            leaves = jax.tree.leaves(tree)
            mean_sq = sum(jnp.sum(jnp.mean(v, 0) ** 2) for v in leaves)
            spread_sq = sum(jnp.sum(jnp.mean((v - jnp.mean(v, 0)) ** 2, 0)) for v in leaves)
            return jnp.sqrt(mean_sq / jnp.maximum(spread_sq, 1e-30)), jnp.sqrt(mean_sq)

        snrs = [snr(g["params"][k])[0] for k in self._groups(params)]
        reward_norm = snr(g)[1]

        def mean_entropy(p):
            a, b = self.policy.apply(p, xp)
            return c * jnp.mean(beta_entropy(a, b))

        ent_norm = optax.tree.norm(jax.grad(mean_entropy)(params))
        return dict(
            reward_sd_per_s=jnp.std(delta, axis=0),
            reward_share_per_s=share,
            reward_per_image=R,
            grad_snr=jnp.stack(snrs),
            entropy_to_reward_grad=ent_norm / jnp.maximum(reward_norm, 1e-30),
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
        if self.entropy_control == "target":
            metrics.update(entropy_coef=jnp.exp(state.log_coef), entropy=state.entropy)
        if self.trust_kl > 0:
            metrics.update(step_kl=state.step_kl, step_scale=state.step_scale)
        if self.advantage == "normalised":
            metrics.update(reward_running_mean=state.adv_mean, reward_running_sd=jnp.sqrt(state.adv_var))
        if self.diagnostics:
            metrics.update(state.diag)
        return state, metrics
