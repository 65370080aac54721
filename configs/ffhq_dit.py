"""SpeeD's DiT set-up (Wang et al. 2024, "A Closer Look at Time Steps is Worthy of Triple Speed-Up for Diffusion
Model Training"): unconditional DiT-XL/2 on FFHQ 256 latents (Stable Diffusion's KL-f8, 32x32x4), uniform vs SpeeD
vs the learned sampler.

    python -m data.encode_latents --dataset=folder ... (FFHQ's 70,000 PNGs: docs/latent.md#encoding-a-dataset)
    python main.py --config=configs/ffhq_dit.py:speed --workdir=gs://BUCKET/ffhq_dit_speed --config.data.path=LATENTS

Variants: uniform | speed | adaptive (default). Settings, from NUS-HPC-AI-Lab/SpeeD configs/comparison/base.yaml,
configs/comparison/ffhq/faster.yaml and speed/diffusion (commit f5650f9), which build on facebookresearch/DiT:
- DiT-XL/2 (1152 wide, 28 blocks, 16 heads, patch 2), learned variances with the hybrid loss (DiT's
  learn_sigma=True, MSE + L_vlb with the mean frozen; lambda 0.001 x T = 1 at T = 1000); unconditional, so
  673,681,568 trainable parameters (tests/test_published.py): DiT-XL/2's 674,834,720 less the 1001 x 1152 label
  table (DiT's printed 675,129,632 also counts its fixed position table).
- T = 1000, linear betas 1e-4..0.02, eps-prediction; AdamW lr 1e-4, no weight decay, no warm-up, no clipping;
  batch 256 (32 per GPU x 8); EMA 0.9999; random flips; latents x 0.18215 (sd-vae-ft-ema).
- SpeeD: k 2 (FFHQ; MetFaces 5), tau 700, lambda 0.6 (the change-aware weighting).
- 200,000 steps at most; SpeeD's scripts evaluate the 50,000-step checkpoint: FID of 10,000 samples with 250
  ancestral steps (DDIM 250 here: DiT's respacing is ancestral on a 250-step subsequence, which we do not have).
No published FID numbers were found in SpeeD's repository; its paper's tables are the comparison.
"""

from configs.published import latent_config, parse_method


def get_config(variant: str = ""):
    c = latent_config(
        "dit", parse_method("ffhq_dit.py", variant, ("uniform", "speed", "adaptive"), "adaptive"), (32, 32, 4)
    )
    c.data.random_flip = True
    m = c.model
    m.size, m.patch_size, m.class_cond, m.dtype = "XL", 2, False, "bfloat16"
    d = c.diffusion
    d.schedule, d.num_timesteps, d.target, d.variance = "linear", 1000, "eps", "learned_range"
    t = c.train
    t.batch_size, t.lr, t.weight_decay, t.warmup_steps, t.grad_clip = 256, 1e-4, 0.0, 0, 0.0
    t.b1, t.b2, t.ema_decay = 0.9, 0.999, 0.9999
    t.num_steps = 200_000
    t.log_every, t.ckpt_every = 500, 10_000
    c.sampler.speed.k, c.sampler.speed.tau = 2.0, 700
    c.weighting.speed.lam, c.weighting.speed.tau = 0.6, 700
    c.sample.method, c.sample.steps = "ddim", 250
    f = c.eval.fid
    f.method, f.steps, f.num_samples, f.batch_size = "ddim", 250, 10_000, 500
    c.eval.periodic.every = 0
    c.sampler.adaptive.policy_lr = 1e-2
    return c
