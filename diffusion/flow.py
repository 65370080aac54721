"""Flow matching / rectified flow (Lipman et al. 2023; Liu et al. 2023; Esser et al. 2024, SD3; Ma et al. 2024,
SiT) in continuous time (config.diffusion, name "flow"): x_t = (1 - t) x0 + t eps, t in [0, 1], t = 1 noise (SD3's
convention); the network regresses the velocity dx_t/dt = eps - x0 ("velocity"). The shared machinery is in
continuous.py.

Time direction: SiT (and the flow-matching papers of Lipman et al.) write x_t = t x0 + (1 - t) eps with t = 1 data
and the velocity x0 - eps. `time_direction="data_at_1"` makes the network see and return that convention
(time 1 - t, velocity negated), so the network computes SiT's function and SiT's configs carry over (a SiT
checkpoint has 2C output channels, of which C would be kept: no loader here does that); everything else (samplers, the
loss, the ELBO, pictures) stays in ours. SiT feeds its time to the embedding unscaled: `time_scale=1` there.

Quantities (ours, t = 1 noise): alpha = 1 - t, sigma = t, lambda = log SNR = 2 log((1 - t) / t),
lambda' = -2 / (t (1 - t)). The loss is the plain MSE of the target (weight 1, as SD3 and SiT train); a weighting
multiplies it (weightings/base.py says how those on log-SNR carry over). Other targets are not offered: eps and v
make x0 = (x_t - t eps) / (1 - t) singular at t = 1, where sampling starts, and x0 makes eps singular at t = 0, where
the likelihood's ODE starts.

The likelihood (`nll_bpd`) is the exact one of the probability-flow ODE (continuous.ode_nll_bpd: Heun, Hutchinson,
uniform dequantisation), from t_min = 0; a flow model has no ELBO of its own, but read as a diffusion model
(eps_hat from its velocity) its ELBO integrand is the learned sampler's reward (continuous.elbo_integrand:
-1/2 lambda' |eps - eps_hat|^2 = (1 - t) / t |v - v_hat|^2 for the velocity target).
"""

import jax
import jax.numpy as jnp

from config.fields import Choice, Int, Num
from diffusion.base import PROCESSES
from diffusion.continuous import TIME_SCALE, ContinuousProcess, ODELikelihood

FLOW_TARGETS = ("velocity",)
DIRECTIONS = ("noise_at_1", "data_at_1")


@PROCESSES.register
class Flow(ContinuousProcess, ODELikelihood):
    name = "flow"
    FIELDS = dict(
        target=Choice("velocity", FLOW_TARGETS),
        time_direction=Choice("noise_at_1", DIRECTIONS),  # SD3: noise_at_1; SiT: data_at_1
        time_scale=Num(TIME_SCALE, 0, lo_open=True, note="the network sees time_scale * t (SiT: 1)"),
        # the resolution of [0, 1] for grids (as config.diffusion.grid of "vp")
        grid=Int(1000, 2),
        likelihood_steps=Int(100, 1),  # Heun steps of the ODE likelihood in --mode=eval
    )

    def __init__(self, **fields):
        """Flow matching with its FIELDS' defaults (written there once), any of them given by keyword."""
        f = self.field_values(fields)
        if f["target"] not in FLOW_TARGETS:
            raise ValueError(f"target {f['target']!r} is not one of {', '.join(FLOW_TARGETS)} for flow matching")
        if f["time_direction"] not in DIRECTIONS:
            raise ValueError(f"time_direction {f['time_direction']!r} is not one of {', '.join(DIRECTIONS)}")
        super().__init__(f["target"], f["grid"], time_scale=f["time_scale"], likelihood_steps=f["likelihood_steps"])
        self.reversed = f["time_direction"] == "data_at_1"

    def alpha_sigma(self, t):
        t = jnp.asarray(t, jnp.float32)
        return 1.0 - t, t

    def logsnr(self, t):
        t = jnp.asarray(t, jnp.float32)
        return 2.0 * (jnp.log1p(-t) - jnp.log(t))

    def t_of_logsnr(self, lam):
        return jax.nn.sigmoid(-0.5 * lam)

    def t_of_sigma(self, s):
        return jnp.clip(s, 0.0, 1.0)

    def net_time(self, t):
        return self.time_scale * (1.0 - t if self.reversed else t)

    def net_out(self, out):
        # data_at_1: the network's velocity is x0 - eps, ours eps - x0
        return -out if self.reversed else out
