"""EDM (Karras et al. 2022) on the embedded handwritten digits with the learned timestep sampler: the default
config's data and 280k-parameter UNet (as configs/flow.py), the variance-exploding path x = x0 + sigma eps with
EDM's preconditioning and loss (diffusion/edm.py; weighting "none" is EDM's lambda(sigma) = 1 / c_out^2), t = u ~
Beta(alpha(x0), beta(x0)) drawn by the policy without rounding (t = sigma / (1 + sigma)), EDM's Heun sampler with
18 noise levels (35 network evaluations), and the exact ODE likelihood in bits/dim. A few minutes on a laptop CPU:

    python main.py --config=configs/edm.py --workdir=workdirs/edm
    python main.py --config=configs/edm.py:lognormal --workdir=workdirs/edm_ln          # EDM's own P_mean, P_std
    python main.py --config=configs/edm.py:lognormal,uncertainty --workdir=workdirs/edm2  # EDM2's learned weighting

The argument is [SAMPLER][,WEIGHTING]: SAMPLER one with a meaning in continuous time (default adaptive): uniform,
antithetic, logitnormal, lognormal (ln sigma ~ N(-1.2, 1.2^2), exactly EDM's draws), infonoise, adaptive_noise,
adaptive; WEIGHTING (default none, EDM's loss) one of none, uncertainty (EDM2), min_snr, p2.
"""

from config.schema import default_config
from config.variants import Slot, parse_variant

SAMPLERS = ("uniform", "antithetic", "logitnormal", "lognormal", "infonoise", "adaptive_noise", "adaptive")
WEIGHTINGS = ("none", "uncertainty", "min_snr", "p2")


def get_config(variant: str = ""):
    sampler, weighting = parse_variant(
        "edm.py",
        variant,
        [Slot(SAMPLERS, "adaptive", optional=True), Slot(WEIGHTINGS, "none", optional=True)],
        f"[SAMPLER][,WEIGHTING], SAMPLER one of {', '.join(SAMPLERS)}, WEIGHTING one of {', '.join(WEIGHTINGS)}",
    )
    c = default_config(data="digits", model="unet", diffusion="edm", sampler=sampler, weighting=weighting)
    c.train.ema_warmup = True  # as configs/default.py
    return heun_sampling(c)


def heun_sampling(c):
    """EDM's Heun sampler for samples, FID and the periodic evaluation (also configs/mnist_latent.py's edm)."""
    c.sample.method = c.eval.fid.method = c.eval.periodic.method = "heun"
    c.sample.steps = c.eval.fid.steps = 18  # EDM's CIFAR-10 sampler: 18 levels, 35 network evaluations
    c.eval.periodic.steps = 10
    c.eval.periodic.nll_timesteps = 20  # Heun steps of the periodic ODE likelihood
    return c
