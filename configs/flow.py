"""Flow matching on the embedded handwritten digits with the learned timestep sampler in continuous time: the
default config's data and 280k-parameter UNet, x_t = (1 - t) x0 + t eps with the velocity target
(diffusion/flow.py), t = u ~ Beta(alpha(x0), beta(x0)) drawn by the policy without rounding (samplers/adaptive.py),
Heun sampling of the probability-flow ODE, and the exact ODE likelihood in bits/dim. A few minutes on a laptop CPU:

    python main.py --config=configs/flow.py --workdir=workdirs/flow
    python main.py --config=configs/flow.py:logitnormal --workdir=workdirs/flow_ln   # SD3's logit-normal(0, 1)
    python main.py --config=configs/flow.py:vp,uniform --workdir=workdirs/vp         # VDM's continuous-time VP

The argument is [PROCESS,][SAMPLER]: PROCESS flow (default) or vp (VDM's linear log-SNR schedule, eps target, its
ELBO in bits/dim), SAMPLER one with a meaning in continuous time (default adaptive): uniform, antithetic,
logitnormal, lognormal, adaptive.
"""

from config.schema import default_config
from config.variants import Slot, parse_variant

PROCESSES = ("flow", "vp")


def get_config(variant: str = ""):
    process, sampler = parse_variant(
        "flow.py",
        variant,
        [Slot(PROCESSES, "flow", optional=True), Slot(None, "adaptive")],
        "[PROCESS,][SAMPLER], PROCESS flow or vp",
    )
    c = default_config(data="digits", model="unet", diffusion=process, sampler=sampler, weighting="none")
    c.train.ema_warmup = True  # as configs/default.py
    c.sample.method = "heun"
    c.sample.steps = 50  # Heun steps: 99 network evaluations
    c.eval.fid.method = "heun"
    c.eval.fid.steps = 50
    c.eval.periodic.method = "heun"
    c.eval.periodic.steps = 25
    c.eval.periodic.nll_timesteps = 20  # Heun steps of the periodic ODE likelihood (vp: stratified times of the ELBO)
    return c
