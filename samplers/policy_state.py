"""The learned sampler's state (samplers/adaptive.py), a pytree carried in the train state and checkpointed whole,
and its mapping to the dict layout that checkpoints written before it had (training/checkpoint.py restores those)."""

import dataclasses

import flax
import jax


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

    # the keys of the dict layout that older checkpoints hold: field -> key
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
