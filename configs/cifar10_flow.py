"""CIFAR-10 with flow matching: the UNet and training set-up of configs/cifar10.py trained on the rectified-flow /
flow-matching path x_t = (1 - t) x0 + t eps (diffusion/flow.py) with the velocity target, one run per timestep
sampler. The argument picks the sampler of t:

    python main.py --config=configs/cifar10_flow.py:adaptive --workdir=gs://BUCKET/c10-flow-adaptive \
        --config.data.data_dir=DIR
    python main.py --config=configs/cifar10_flow.py:logitnormal --workdir=gs://BUCKET/c10-flow-ln \
        --config.data.data_dir=DIR

Variants (default adaptive):
    uniform       t ~ U(0, 1) (Liu et al. 2023; Lipman et al. 2023; SiT)
    logitnormal   t = sigmoid(m + s z), z ~ N(0, 1), m = 0, s = 1 (SD3, Esser et al. 2024)
    adaptive      the learned sampler (Kim et al.) in continuous time: t ~ Beta(alpha(x0), beta(x0)), not rounded
All three train the unweighted velocity MSE |v - (eps - x0)|^2 (weighting none). The data must be prepared beforehand
(no download at run time): see docs/config.md#datasets.

From configs/cifar10.py, unchanged: the data (CIFAR-10 32x32x3, random horizontal flips); the 35.7M-parameter DDPM
UNet (ch 128, ch_mult (1, 2, 2, 2), 2 res blocks, attention at 16x16, dropout 0.1, 32 groups); Adam lr 2e-4 with
5,000 linear warm-up steps, clipping 1.0, EMA 0.9999, batch 128, 800k steps, logs every 1,000 and checkpoints every
10,000 steps; the learned sampler's settings (policy at full width, the whole batch probed, sweep stride 4, i.e. a
sweep of ceil(1000 / 4) = 250 cell midpoints of [0, 1] in continuous time) and its defaults otherwise (reward
"bound", the ELBO integrand, chosen by measurement on the digits: samplers/adaptive.py); FID-50k of the EMA
parameters against the training set's Inception statistics; the periodic curves every 20k steps on 1,000 test
images and 1,000 samples.

New here: diffusion "flow" with its defaults (target velocity, time_direction noise_at_1: t = 1 is noise, SD3's
direction; the network sees 1000 t, the scale of the DDPM timesteps the UNet's embedding was written for; grid 1000;
likelihood_steps 100, the Heun steps of the exact ODE likelihood that --mode=eval reports in bits/dim, with uniform
dequantisation). Sampling integrates the probability-flow ODE with Heun's method (EDM's Algorithm 1, the last step
Euler): 50 Heun steps = 99 network evaluations for the sample grid and for FID-50k (the DDPM run's protocol is
1000-step ancestral sampling, which has no counterpart in a flow). The periodic curves use 25 Heun steps
(49 evaluations, about configs/cifar10.py's DDIM-50) for the 1,000 samples, and 25 Heun steps of the ODE likelihood
(one Hutchinson probe per image) for the bits/dim of the 1,000 test images.

Published numbers: none for this setting (this UNet with flow matching and these samplers), so none is claimed.
Liu et al. 2023 (rectified flow, gnobitab/RectifiedFlow ImageGeneration/configs/rectified_flow/
cifar10_rf_gaussian_ddpmpp.py) train CIFAR-10 with score_sde's DDPM++ network (ncsnpp with nf 128, 4 res blocks,
BigGAN res blocks, dropout 0.15, EMA 0.999999), not this UNet, and sample with RK45 (tolerance 1e-5); their FID could
not be found in a source we could read here, so none is cited.
"""

from configs import cifar10, published
from diffusion import PROCESSES

# variant -> the timestep sampler (config.sampler.name); the weighting is "none" for every variant
VARIANTS = ("uniform", "logitnormal", "adaptive")
DEFAULT = "adaptive"


def get_config(variant: str = ""):
    sampler = published.parse_name("cifar10_flow.py", variant, VARIANTS, DEFAULT)
    # the CIFAR-10 data, UNet, optimiser, EMA, schedule of steps and learned-sampler settings of configs/cifar10.py
    c = cifar10.get_config("linear,uniform")
    c.diffusion = PROCESSES.default_config("flow")
    d = c.diffusion
    d.name, d.target, d.time_direction, d.time_scale = "flow", "velocity", "noise_at_1", 1000.0
    c.sampler.name, c.weighting.name = sampler, "none"
    c.sampler.logitnormal.mean, c.sampler.logitnormal.std = 0.0, 1.0  # SD3's logit-normal(0, 1)
    c.sample.method, c.sample.steps = "heun", 50  # Heun steps: 99 network evaluations
    f = c.eval.fid
    f.method, f.steps, f.num_samples = "heun", 50, 50_000
    p = c.eval.periodic
    p.method, p.steps = "heun", 25
    p.nll_timesteps = 25  # Heun steps of the periodic ODE likelihood
    return c
