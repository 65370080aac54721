"""The method paper's U-ViT experiment: class-conditional U-ViT on ImageNet 256 latents (Stable Diffusion's KL-f8
autoencoder, 32x32x4) with Min-SNR weighting, with and without the learned sampler. Published (Kim et al., CVPR
2025): FID 4.54 (Min-SNR) -> 4.33 (learned sampler + Min-SNR) at 1.0M iterations. U-ViT's own (baofff/U-ViT README):
U-ViT-L/2 FID 3.40 at 300k steps, U-ViT-H/2 2.29 at 500k, batch 1024, guidance.

    python -m data.encode_latents --dataset=folder ... (an ImageNet train/ tree: docs/latent.md#encoding-a-dataset)
    python main.py --config=configs/imagenet256_uvit.py:adaptive+min_snr --workdir=gs://BUCKET/uvit_ant \
        --config.data.path=LATENTS

Variants: min_snr (the paper's baseline: uniform timesteps + Min-SNR-5), adaptive (the learned sampler alone),
adaptive+min_snr (default; the paper's run), uniform. Settings, from baofff/U-ViT configs/imagenet256_uvit_large.py,
train_ldm_discrete.py and libs/uvit.py (commit ce55170):
- U-ViT-L/2: 1024 wide, 21 blocks (the config's depth 20 plus the middle one), 16 heads, mlp ratio 4, no qkv bias,
  no time MLP, the final 3x3 conv; 1000 classes + the null class; 286,763,172 parameters (tests/test_published.py).
- AdamW lr 2e-4, weight decay 0.03, betas (0.99, 0.99), 5,000 linear warm-up steps then constant, no clipping;
  batch 1024; EMA 0.9999; label dropout (p_uncond) 0.15.
- T = 1000, Stable Diffusion's betas (schedule "sd"), eps-prediction, plain MSE; latents x 0.18215.
- Sampling for FID: 50,000 samples, guidance 1.4 in the usual convention (U-ViT's "scale 0.4" is
  eps_c + 0.4 (eps_c - eps_u)); U-ViT samples with DPM-Solver (50 steps), which we do not have: DDIM 50 steps here.
- Min-SNR-5 (Hang et al. 2023): w = min(SNR, 5) / SNR for eps-prediction (weightings/min_snr.py).
Not found in any public source, chosen here: which U-ViT size the paper trained (L/2 here: U-ViT's L config; its
discrete-time script is written for H/2, its L/2 run is continuous-time: we train L/2 on the discrete SD schedule);
the paper's batch size (U-ViT's 1024 here) and the learned sampler's settings on latents (the CIFAR-10 ones).
"""

from configs.published import latent_config, parse_method

VARIANTS = ("min_snr", "adaptive", "adaptive+min_snr", "uniform")


def get_config(variant: str = ""):
    c = latent_config("uvit", parse_method("imagenet256_uvit.py", variant, VARIANTS, "adaptive+min_snr"), (32, 32, 4))
    c.data.num_classes = 1000  # ImageNet's classes (checked against the encoded latents)
    c.data.random_flip = True  # U-ViT encodes each image and its mirror (encode_latents --flip=yes)
    m = c.model
    m.size, m.patch_size, m.qkv_bias, m.mlp_time_embed, m.conv = "L", 2, False, False, True
    m.class_cond, m.label_dropout, m.dtype = True, 0.15, "bfloat16"
    d = c.diffusion
    d.schedule, d.num_timesteps, d.target, d.variance = "sd", 1000, "eps", "fixed_small"
    t = c.train
    t.batch_size, t.lr, t.weight_decay, t.warmup_steps, t.grad_clip = 1024, 2e-4, 0.03, 5000, 0.0
    t.b1, t.b2, t.ema_decay = 0.99, 0.99, 0.9999
    t.num_steps = 1_000_000
    t.log_every, t.ckpt_every = 500, 10_000
    c.sample.method, c.sample.steps, c.sample.guidance_scale = "ddim", 50, 4.0
    f = c.eval.fid
    f.method, f.steps, f.num_samples, f.batch_size, f.guidance_scale = "ddim", 50, 50_000, 1000, 1.4
    c.eval.periodic.every = 0
    c.sampler.adaptive.policy_lr = 1e-2
    return c
