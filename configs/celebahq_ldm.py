"""The method paper's LDM experiment: an unconditional latent diffusion model on CelebA-HQ 256 in the latent space
of the LDM's VQ-f4 autoencoder (64x64x3 latents), uniform vs the learned timestep sampler. Published (Kim et al.,
CVPR 2025): FID 8.72 (uniform) -> 6.62 (learned sampler) at 300 epochs. The LDM's own CelebA-HQ model reports FID
5.11 (200 DDIM steps, eta 0; CompVis/latent-diffusion README), trained much longer.

    # once: the VQ-f4 first stage in diffusers format (e.g. CompVis/ldm-celebahq-256's vqvae/ folder) and the
    # prepared tensorflow-datasets celeb_a_hq/256 (docs/config.md#datasets); then
    python -m data.encode_latents --dataset=celeb_a_hq --data_dir=DIR --autoencoder=VQ_DIR --output=latents/celebahq
    python main.py --config=configs/celebahq_ldm.py:adaptive --workdir=workdirs/celebahq_ldm_adaptive \
        --config.data.path=latents/celebahq --config.eval.fid.inception_weights=W --config.eval.fid.reference_stats=S

Variants: uniform | adaptive (default). Settings, from CompVis/latent-diffusion
configs/latent-diffusion/celebahq-ldm-vq-4.yaml and main.py (commit a506df5):
- UNet (openaimodel) model_channels 224, channel_mult (1, 2, 3, 4), 2 res blocks, attention at latent resolutions
  32, 16, 8 (attention_resolutions [8, 4, 2] are downsampling factors) with 32 channels per head, dropout 0,
  no scale-shift norm: our UNet with these fields has the same 274,056,163 parameters (tests/test_published.py).
- T = 1000, betas linspace(sqrt(0.0015), sqrt(0.0195))^2 (schedule "ldm"; "linear" in LDM's code means this),
  eps-prediction, plain MSE (l_simple_weight 1, original_elbo_weight 0); the LDM samples with the posterior
  variance (fixed_small here).
- AdamW lr 9.6e-5 (base_learning_rate 2e-6 x batch 48 x 1 GPU, main.py's --scale_lr), torch's default weight
  decay 0.01 and betas (0.9, 0.999), no warm-up, no clipping; batch 48; EMA 0.9999.
- Latents: the VQ-f4's pre-quantisation h with scale factor 1.0 (the config sets none: LatentDiffusion's default).
Not found in any public source (the method's code covers CIFAR-10 only), chosen here and open to change:
- the learned sampler's settings on latents (the CIFAR-10 ones: policy lr 1e-2, entropy 1e-2, update every 40
  steps, 3 selected timesteps; 16 probe images of the 48); its policy network is the same small CNN, which takes
  64x64x3 latents;
- what "300 epochs" counts: 300 passes over the 27,000 training images of the taming split (CelebAHQTrain) at batch
  48 is 168,750 steps (num_steps below); tfds' celeb_a_hq has all 30,000 images in one split;
- LDM's EMA warms up as min(0.9999, (1 + n) / (10 + n)) at its n-th update: train.ema_warmup, the same form;
- FID protocol: 50,000 samples with 200 DDIM steps against the training images (LDM's table).
"""

from configs.published import latent_config, parse_method


def get_config(variant: str = ""):
    c = latent_config(
        "unet", parse_method("celebahq_ldm.py", variant, ("uniform", "adaptive"), "adaptive"), (64, 64, 3)
    )
    c.data.random_flip = False  # the taming CelebA-HQ loader does not flip (set True after encoding with --flip=yes)
    m = c.model
    m.ch, m.ch_mult, m.num_res_blocks, m.attn_resolutions = 224, (1, 2, 3, 4), 2, (32, 16, 8)
    m.dropout, m.num_groups, m.num_head_channels = 0.0, 32, 32
    d = c.diffusion
    d.schedule, d.num_timesteps, d.target, d.variance = "ldm", 1000, "eps", "fixed_small"
    t = c.train
    t.batch_size, t.lr, t.weight_decay, t.warmup_steps, t.grad_clip = 48, 9.6e-5, 0.01, 0, 0.0
    t.b1, t.b2, t.ema_decay = 0.9, 0.999, 0.9999
    t.ema_warmup = True  # LDM's LitEma with use_num_upates=True (its default): min(0.9999, (1 + n) / (10 + n))
    t.num_steps = 168_750
    t.log_every, t.ckpt_every = 500, 5000
    c.sample.method, c.sample.steps = "ddim", 200
    c.eval.fid.method, c.eval.fid.steps, c.eval.fid.num_samples, c.eval.fid.batch_size = "ddim", 200, 50_000, 500
    c.eval.periodic.every = 0
    c.sampler.adaptive.policy_lr = 1e-2
    c.sampler.adaptive.probe_batch_size = 16  # a divisor of 48 and a multiple of 8 devices (the default 32 is not)
    return c
