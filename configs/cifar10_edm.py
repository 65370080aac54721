"""CIFAR-10 with EDM (Karras et al. 2022; NVlabs/edm), its DDPM++ set-up at the closest this project's UNet can
express, one run per timestep sampler:

    python main.py --config=configs/cifar10_edm.py:lognormal --workdir=gs://BUCKET/c10-edm-ln \
        --config.data.data_dir=DIR
    python main.py --config=configs/cifar10_edm.py:adaptive,cond --workdir=gs://BUCKET/c10-edm-adaptive-cond \
        --config.data.data_dir=DIR

Variants SAMPLER[,cond] (default adaptive, unconditional):
    lognormal   EDM's own: ln sigma ~ N(-1.2, 1.2^2) (EDMLoss's P_mean, P_std), exactly its draws
    uniform     t ~ U(0, 1), t = sigma / (1 + sigma)
    adaptive    the learned sampler (Kim et al.) in continuous time, configs/cifar10.py's settings
    ,cond       class-conditional (EDM's --cond=1), no label dropout (EDM trains no null class; no guidance)
All train EDM's loss: weighting "none" is lambda(sigma) |D - x0|^2 (diffusion/edm.py). The data must be prepared
beforehand (no download at run time): see docs/config.md#datasets.

Published (EDM paper and README, FID-50k, 35 network evaluations, DDPM++ "config F" with EDM's preconditioning,
loss, log-normal sigmas and augmentation): 1.79 class-conditional, 1.97 unconditional. EDM reports the minimum over
three FID evaluations of 50k samples with different seeds; --mode=eval here computes one. Not run here.

Settings from NVlabs/edm's train.py (--arch=ddpmpp --precond=edm, its defaults), training/training_loop.py,
training/networks.py and generate.py, and what could not be matched:
- Network: DDPM++ (SongUNet with embedding_type positional, encoder and decoder standard, resample_filter [1, 1]),
  model_channels 128, channel_mult [2, 2, 2], 4 blocks per resolution, attention at 16x16, dropout 0.13, embedding
  width 4 x 128. Here the DDPM UNet (models/unet.py) with ch 128, ch_mult (2, 2, 2), num_res_blocks 4,
  attn_resolutions (16,), dropout 0.13, 32 groups: 53,634,563 parameters (unconditional; + 5,632 for 10 classes and
  the null class) against DDPM++'s 55,732,739 (counted from networks.py's SongUNet by its structure, without the
  augmentation labels' map of 1,152 and the class map of 1,408). Not expressible: DDPM++'s down- and up-sampling
  residual blocks (ours: a strided conv and nearest-neighbour upsampling plus a conv), its skip scale 1/sqrt(2) in
  every residual block, its extra attention block at the lowest resolution's input (ours: the middle block
  res-attn-res), its initialisation (Xavier uniform, 1e-5 output scale), GroupNorm eps 1e-6.
- Time input: time_scale 1, so the UNet's sinusoidal embedding sees EDM's c_noise = ln(sigma) / 4 itself, which is
  DDPM++'s positional embedding (max_positions 10000, endpoint True, sin then cos).
- Preconditioning, loss and sampler: EDM's (diffusion/edm.py): sigma_data 0.5; Heun with 18 levels (rho 7, sigma
  0.002 to 80, 35 network evaluations) for the sample grid, the periodic curves and FID-50k; no churn (CIFAR-10's
  deterministic sampler).
- Optimiser: Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, batch 512, no gradient clipping (EDM replaces NaN and Inf
  in gradients instead: here a non-finite step stops the run); the learning-rate ramp-up over 10 Mimg is 19,531
  linear warm-up steps (EDM: lr min(n_img / 10^7, 1)).
- 200 Mimg: 390,625 steps of 512.
- EMA half-life 0.5 Mimg: decay 0.5^(512 / 500,000) = 0.99929 per step. EDM ramps the half-life up as
  min(0.5 Mimg, 0.05 n_img); here the project's EMA warm-up, min(decay, (1 + n) / (10 + n)), the nearest form.
- Data: CIFAR-10 32x32 train set, values in [-1, 1]. EDM's non-leaking augmentation (probability 0.12, the network
  conditioned on the augmentation's 9 labels, xflip off) is not implemented; the project's random horizontal flips
  stay on instead.
- Loss: EDM sums lambda |D - x0|^2 over dimensions, the project averages (a constant factor, which Adam does not see).
- Mixed precision off (EDM's CIFAR-10 runs are float32 too).
"""

from config.variants import Slot, one_of, parse_variant
from configs import cifar10
from diffusion import PROCESSES

SAMPLERS = ("lognormal", "uniform", "adaptive")
VARIANTS = (*SAMPLERS, *(f"{s},cond" for s in SAMPLERS))
DEFAULT = "adaptive"
BATCH = 512
MIMG = 200
EMA_HALFLIFE_IMG = 500_000
LR_RAMPUP_IMG = 10_000_000


def get_config(variant: str = ""):
    sampler, cond = parse_variant(
        "cifar10_edm.py",
        (variant or "").replace(" ", ""),
        [Slot(SAMPLERS, DEFAULT), Slot(("cond",), "", optional=True)],
        one_of(VARIANTS, DEFAULT),
    )
    # the CIFAR-10 data, FID protocol, periodic curves and learned-sampler settings of configs/cifar10.py
    c = cifar10.get_config("linear,uniform")
    c.diffusion = PROCESSES.default_config("edm")
    c.diffusion.time_scale = 1.0  # EDM's c_noise itself (module docstring)
    m = c.model
    m.ch, m.ch_mult, m.num_res_blocks, m.attn_resolutions, m.dropout, m.num_groups = 128, (2, 2, 2), 4, (16,), 0.13, 32
    m.class_cond = cond == "cond"
    m.label_dropout = 0.0
    t = c.train
    t.batch_size, t.lr, t.b1, t.b2, t.grad_clip = BATCH, 1e-3, 0.9, 0.999, 0.0
    t.num_steps = MIMG * 1_000_000 // BATCH
    t.warmup_steps = LR_RAMPUP_IMG // BATCH
    t.ema_decay = 0.5 ** (BATCH / EMA_HALFLIFE_IMG)
    t.ema_warmup = True
    c.sampler.name, c.weighting.name = sampler, "none"
    c.sampler.lognormal.mean, c.sampler.lognormal.std = -1.2, 1.2  # EDM's P_mean, P_std
    c.sample.method, c.sample.steps = "heun", 18  # 35 network evaluations
    f = c.eval.fid
    f.method, f.steps, f.num_samples = "heun", 18, 50_000
    p = c.eval.periodic
    p.method, p.steps = "heun", 18
    p.nll_timesteps = 25  # Heun steps of the periodic ODE likelihood
    return c
