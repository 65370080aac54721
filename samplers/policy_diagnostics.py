"""What the learned sampler's reward and policy gradient carry at an update (`diagnostics=True` of
samplers/adaptive.py; read by benchmarks/reward.py, docs/benchmarks/reward.md#what-the-reward-carries)."""

import jax
import jax.numpy as jnp
import optax

from samplers.policy import beta_entropy, beta_log_prob


def layer_names(params):
    """The policy's layers (its top-level modules), in a fixed order."""
    return sorted(params["params"])


def initial(params, num_selected: int, probe: int) -> dict:
    """The diagnostics' state before the first update (zeros of the shapes `measure` returns)."""
    zero = jnp.zeros((), jnp.float32)
    return dict(
        reward_sd_per_s=jnp.zeros((num_selected,), jnp.float32),
        reward_share_per_s=jnp.zeros((num_selected,), jnp.float32),
        reward_per_image=jnp.zeros((probe,), jnp.float32),
        grad_snr=jnp.zeros((len(layer_names(params)),), jnp.float32),
        entropy_to_reward_grad=zero,
    )


def measure(apply, params, xp, up, advantage, from_policy, c, delta) -> dict:
    """At an update, before the policy step (apply(params, x) -> (alpha, beta); delta [P, |S|] the reward's terms):
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
        a, b = apply(p, x[None])
        return beta_log_prob(u, a[0], b[0])

    g = jax.vmap(jax.grad(logp), in_axes=(None, 0, 0))(params, xp, up)
    weight = -advantage * from_policy.astype(jnp.float32)
    g = jax.tree.map(lambda v: v * weight.reshape((-1,) + (1,) * (v.ndim - 1)), g)

    def snr(tree):
        leaves = jax.tree.leaves(tree)
        mean_sq = sum(jnp.sum(jnp.mean(v, 0) ** 2) for v in leaves)
        spread_sq = sum(jnp.sum(jnp.mean((v - jnp.mean(v, 0)) ** 2, 0)) for v in leaves)
        return jnp.sqrt(mean_sq / jnp.maximum(spread_sq, 1e-30)), jnp.sqrt(mean_sq)

    snrs = [snr(g["params"][k])[0] for k in layer_names(params)]
    reward_norm = snr(g)[1]

    def mean_entropy(p):
        a, b = apply(p, xp)
        return c * jnp.mean(beta_entropy(a, b))

    ent_norm = optax.tree.norm(jax.grad(mean_entropy)(params))
    return dict(
        reward_sd_per_s=jnp.std(delta, axis=0),
        reward_share_per_s=share,
        reward_per_image=R,
        grad_snr=jnp.stack(snrs),
        entropy_to_reward_grad=ent_norm / jnp.maximum(reward_norm, 1e-30),
    )
