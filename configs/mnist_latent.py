"""Latent diffusion on the embedded MNIST, offline end to end on a laptop CPU: a tiny class-conditional transformer
(DiT or U-ViT) trained on 7x7x4 latents of the project's own small KL autoencoder (data/embedded_autoencoder.py,
trained once on the 4,000 training digits and cached), with classifier-free guidance, the learned timestep sampler,
and samples and FID decoded to pixels and scored in the embedded MNIST classifier's feature space.

    python -m data.encode_latents --dataset=mnist --autoencoder=embedded:mnist --output=latents/mnist && \
        python main.py --config=configs/mnist_latent.py:dit --workdir=workdirs/mnist_dit

The argument is MODEL[,SAMPLER]: MODEL dit (DiT with adaLN-Zero, learned variances and the hybrid loss, as DiT
trains) or uvit (U-ViT with time and class tokens and long skips, fixed variances, as U-ViT trains); SAMPLER any
registered sampler (default adaptive). Numbers in latent space (the bound) are labelled as such; FID/KID are of the
decoded images.
"""

from config.schema import default_config

MODELS = ("dit", "uvit")


def get_config(variant: str = "dit"):
    parts = [p.strip() for p in (variant or "dit").split(",") if p.strip()]
    model = parts[0] if parts else "dit"
    sampler = parts[1] if len(parts) > 1 else "adaptive"
    if model not in MODELS or len(parts) > 2:
        raise ValueError(
            f"configs/mnist_latent.py:{variant!r} is not a variant: use MODEL[,SAMPLER] with MODEL one of "
            f"{', '.join(MODELS)}"
        )
    c = default_config(data="latents", model=model, diffusion="ddpm", sampler=sampler, weighting="none")
    c.data.path = "latents/mnist"  # written by the encode_latents command above
    c.data.image_size, c.data.channels = 7, 4
    c.model.size = "custom"
    c.model.patch_size = 1  # 49 tokens
    c.model.hidden_size, c.model.depth, c.model.num_heads = (96, 4, 4) if model == "dit" else (96, 5, 4)
    c.model.class_cond = True
    c.data.num_classes = 10  # the digits (checked against the encoded latents)
    c.model.label_dropout = 0.1
    if model == "dit":
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
    return c
