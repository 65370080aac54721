"""Latent diffusion on the embedded MNIST, offline end to end on a laptop CPU: a tiny class-conditional transformer
(DiT or U-ViT) trained on 7x7x4 latents of the project's own small KL autoencoder (data/embedded_autoencoder.py,
trained once on the 4,000 training digits and cached), with classifier-free guidance, the learned timestep sampler,
and samples and FID decoded to pixels and scored in the embedded MNIST classifier's feature space.

    python -m data.encode_latents --dataset=mnist --autoencoder=embedded:mnist --output=latents/mnist && \
        python main.py --config=configs/mnist_latent.py:dit --workdir=workdirs/mnist_dit

The argument is MODEL[,SAMPLER][,PROCESS]: MODEL dit (DiT with adaLN-Zero, learned variances and the hybrid loss,
as DiT trains) or uvit (U-ViT with time and class tokens and long skips, fixed variances, as U-ViT trains); SAMPLER
any registered sampler (default adaptive); PROCESS ddpm (default: the 1,000-step chain) or edm. Numbers in latent
space (the bound, or EDM's exact ODE likelihood of the latents) are labelled as such; FID/KID are of the decoded
images.

PROCESS edm (the rivals' own setting on latents; `configs/edm.py` is the same on pixels): EDM's
preconditioning, loss and Heun sampler (18 levels, 35 evaluations; the periodic estimate 10 levels and 20 Heun steps
of the ODE likelihood, as configs/edm.py, on the final evaluation's 200 test latents), fixed network variance (EDM
has no learned variance: DiT outputs C channels). Two choices the formulas leave open, both from EDM2 (Karras et al.
2024), whose latent models train on latents scaled to standard deviation 0.5 with sigma_data = 0.5 and log-normal
P_mean = -0.4, P_std = 1.0 (its ImageNet-512 setting): our latents have standard deviation 1 (the autoencoder's
scaling factor, LDM's recipe), so sigma_data = 1 (EDM's definition: the data's standard deviation), and the
log-normal is EDM2's moved to that scale (sigma scales with the data: ln sigma ~ N(-0.4 + ln 2, 1.0^2)); InfoNoise,
the adaptive noise schedule and the learned sampler adapt on their own.
"""

import math

from config.schema import default_config
from config.variants import Slot, parse_variant
from configs.edm import heun_sampling

MODELS = ("dit", "uvit")
PROCESSES = ("ddpm", "edm")


def get_config(variant: str = "dit"):
    model, sampler, process = parse_variant(
        "mnist_latent.py",
        variant,
        [Slot(MODELS, "dit"), Slot(None, "adaptive"), Slot(PROCESSES, "ddpm")],
        f"MODEL[,SAMPLER][,PROCESS] with MODEL one of {', '.join(MODELS)} and PROCESS one of {', '.join(PROCESSES)}",
    )
    c = default_config(data="latents", model=model, diffusion=process, sampler=sampler, weighting="none")
    c.data.path = "latents/mnist"  # written by the encode_latents command above
    c.data.image_size, c.data.channels = 7, 4
    c.model.size = "custom"
    c.model.patch_size = 1  # 49 tokens
    c.model.hidden_size, c.model.depth, c.model.num_heads = (96, 4, 4) if model == "dit" else (96, 5, 4)
    c.model.class_cond = True
    c.data.num_classes = 10  # the digits (checked against the encoded latents)
    c.model.label_dropout = 0.1
    if model == "dit" and process == "ddpm":
        c.diffusion.variance = "learned_range"  # DiT: learn_sigma with the hybrid loss
    c.train.batch_size = 64
    c.train.ema_warmup = True  # as configs/default.py
    c.train.num_steps = 3000
    c.train.lr = 1e-3  # as the digits; 3e-4 left the samples blurrier at 3,000 steps
    c.train.log_every = 100
    c.train.ckpt_every = 1000
    c.sample.num = 100  # ten of each class
    c.sample.method = "ddim"
    c.sample.steps = 50
    c.sample.guidance_scale = 2.0
    c.eval.fid.guidance_scale = 1.5
    c.eval.fid.num_samples = 1000
    c.eval.nll_images = 200  # the full 1000-step bound of 200 test latents (all 1,000: about 5 times longer)
    c.eval.periodic.every = 1000
    if process == "edm":  # module docstring
        c.diffusion.sigma_data = 1.0
        c.sampler.lognormal.mean = -0.4 + math.log(2.0)
        c.sampler.lognormal.std = 1.0
        heun_sampling(c)
        # the final evaluation's latents: the ODE likelihood of all 1,000 test latents made each periodic evaluation
        # 105 s, a quarter of a run (benchmarks/tables37.sh)
        c.eval.periodic.nll_images = c.eval.nll_images
    return c
