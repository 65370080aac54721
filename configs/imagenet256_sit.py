"""SiT-B/2 (Ma et al. 2024, "SiT: Exploring Flow and Diffusion-based Generative Models with Scalable Interpolant
Transformers", willisma/SiT): class-conditional flow matching on ImageNet 256 latents (Stable Diffusion's KL-f8,
32x32x4), SiT's uniform t against SD3's logit-normal t and the learned sampler.

    python -m data.encode_latents --dataset=folder --set=train_dir=/data/imagenet/train --set=class_folders=True \
        --set=num_classes=1000 --autoencoder=/weights/sd-vae-ft-ema --flip=yes --output=latents/imagenet256
    python main.py --config=configs/imagenet256_sit.py:uniform --workdir=gs://BUCKET/sit_b2_uniform \
        --config.data.path=LATENTS

Variants: uniform (default; SiT's own: t ~ U(0, 1), its train_eps is 0 for the linear path with the velocity),
logitnormal (SD3's logit-normal(0, 1) density of t), adaptive (the learned sampler in continuous time, with the
project's default fields, as configs/imagenet256_uvit.py and configs/ffhq_dit.py). Every variant trains the
unweighted velocity MSE, as SiT (loss_weight None).

Published (FID-50K on ImageNet 256, no guidance; not run here):
- SiT-B/2 at 400k steps: 33.0 (SiT paper, arXiv 2401.08740, Table 1, as cited in raywang4/DispLoss issue #4 and in
  willisma/SiT issue #31; we could not read the table itself). It is an SDE number: the DispLoss authors (DispLoss
  #4) say the 33.0 comes from SiT's SDE sampler (sample_ddp.py's default: Euler, 250 steps), the SiT author says
  the same of the paper's SiT-XL/2 8.3 (SiT #31); with the ODE the DispLoss paper's own SiT-B/2 baseline at 400k
  is 36.49 (DispLoss #4). A user reports 34.7 on retraining SiT-B/2 for 400k steps (SiT #31).
- A JAX reimplementation reports SiT-B/2 34.49 with uniform t and 29.35 with logit-normal(0, 1) at a similar budget
  (as reported second-hand, docs/method.md#beyond-the-ddpm-chain: the reimplementation itself could not be found).
Ours samples with an ODE (below), so the uniform run compares with the ODE figures more than with 33.0.

Settings, from willisma/SiT train.py, train_utils.py, models.py, transport/ and sample_ddp.py (commit 947f95b):
- SiT-B/2 is DiT-B/2's network (models.py is DiT's: adaLN-Zero blocks, the same initialisation): hidden 768, depth
  12, 12 heads, patch 2, mlp ratio 4; class-conditional with 1000 classes + the null class, label dropout
  (class_dropout_prob) 0.1. SiT builds it with learn_sigma=True (2C = 8 output channels) and its forward drops the
  second half: a velocity model uses only the first C. Our flow process has no learned variance, so the model is
  built with C = 4 output channels: 130,303,504 trainable parameters against SiT-B/2's 130,315,808 (DiT-B/2's,
  tests/fixtures/transformer_param_counts.json; SiT's train.py prints 130,512,416, which also counts the frozen
  position table); the 12,304 missing are the final linear's outputs for the unused channels. A SiT checkpoint
  therefore loads only with those outputs dropped from final_layer.linear (laid out (p, p, 2C), channel fastest:
  keep the outputs with channel < C); no loader here does that.
- Linear interpolant, velocity prediction: SiT's x_t = t x1 + (1 - t) eps (t = 1 data), target x1 - eps, t fed to the
  256-sinusoid embedding unscaled. Here diffusion "flow" with time_direction="data_at_1" (the network sees 1 - t
  and returns x0 - eps) and time_scale=1, so the network computes SiT's function; ours is x_t = (1 - t) x0 + t eps.
  Uniform and logit-normal(0, 1) are symmetric, the same density in either direction.
- AdamW lr 1e-4, no weight decay, betas (0.9, 0.999), no warm-up, no clipping; batch 256 (global); EMA 0.9999 from
  the first step (SiT copies the model into the EMA before training); 400k steps (SiT's paper budget for the B/2
  figure; train.py's default is 1400 epochs).
- Data: ADM's center crop, random horizontal flips, sd-vae-ft-ema (train.py's default "ema"), latents x 0.18215.
  SiT encodes each step and draws a latent from the posterior (latent_dist.sample()); here the posterior mean of the
  image or its mirror is encoded once (data/encode_latents.py): a known difference, kept.
- FID: 50,000 samples, guidance 1 (sample_ddp.py's default cfg-scale 1.0; the figures above are without guidance).
  SiT samples with an adaptive dopri5 ODE (atol 1e-6, rtol 1e-3) or its SDE (Euler, 250 steps, last step "Mean"
  of size 0.04); we have neither and integrate the ODE with Heun: 125 steps = 249 network evaluations, about the
  SDE's 250. The sample grid uses 50 Heun steps and guidance 4 (train.py's cfg-scale for its sample grids; SiT's
  forward_with_cfg guides only the first 3 of the 4 channels, DiT's legacy; ours guides all 4).
- Compute dtype bfloat16 (as configs/ffhq_dit.py; SiT's PyTorch script runs float32 with TF32 matmuls, and its README
  says the paper's models were trained in JAX on TPUs, precision not stated).
Not found in any public source, chosen here: the logit-normal and learned-sampler variants' other settings (SD3's
m = 0, s = 1; the learned sampler's default fields, policy lr 1e-2), the periodic evaluation (off, as the other
published configs).
"""

from configs.published import latent_config, parse_name
from diffusion import PROCESSES

VARIANTS = ("uniform", "logitnormal", "adaptive")
DEFAULT = "uniform"


def get_config(variant: str = ""):
    sampler = parse_name("imagenet256_sit.py", variant, VARIANTS, DEFAULT)
    c = latent_config("dit", (sampler, "none"), (32, 32, 4))
    c.data.num_classes = 1000  # ImageNet's classes (checked against the encoded latents)
    c.data.random_flip = True  # SiT flips each image (RandomHorizontalFlip); encode_latents --flip=yes
    m = c.model
    m.size, m.patch_size, m.class_cond, m.label_dropout, m.dtype = "B", 2, True, 0.1, "bfloat16"
    c.diffusion = PROCESSES.default_config("flow")
    d = c.diffusion
    d.name, d.target, d.time_direction, d.time_scale = "flow", "velocity", "data_at_1", 1.0
    t = c.train
    t.batch_size, t.lr, t.weight_decay, t.warmup_steps, t.grad_clip = 256, 1e-4, 0.0, 0, 0.0
    t.b1, t.b2, t.ema_decay = 0.9, 0.999, 0.9999
    t.num_steps = 400_000
    t.log_every, t.ckpt_every = 500, 10_000
    c.sampler.logitnormal.mean, c.sampler.logitnormal.std = 0.0, 1.0
    c.sampler.adaptive.policy_lr = 1e-2
    c.sample.method, c.sample.steps, c.sample.guidance_scale = "heun", 50, 4.0
    f = c.eval.fid
    f.method, f.steps, f.num_samples, f.batch_size, f.guidance_scale = "heun", 125, 50_000, 1000, 1.0
    p = c.eval.periodic
    p.every, p.method, p.steps = 0, "heun", 25
    return c
