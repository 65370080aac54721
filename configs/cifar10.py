"""CIFAR-10 as in the reference set-up (method.md 1.5): 35.7M-parameter DDPM UNet, quad schedule, T = 1000,
eps-prediction, fixed-large variance, Adam 2e-4 with 5000 warm-up steps, clip 1.0, EMA 0.9999, batch 128, 800k steps.

    python main.py --config=configs/cifar10.py --workdir=gs://BUCKET/cifar10 --config.data.data_dir=DIR

The data must be prepared beforehand (no download at run time): see the README.
"""
from configs import default


def get_config():
    c = default.get_config()
    c.data.name = "cifar10"
    c.data.image_size = 32
    c.data.channels = 3
    c.model.ch = 128
    c.model.ch_mult = (1, 2, 2, 2)
    c.model.num_res_blocks = 2
    c.model.attn_resolutions = (16,)
    c.model.dropout = 0.1
    c.model.num_groups = 32
    c.diffusion.schedule = "quad"
    c.train.num_steps = 800_000
    c.train.lr = 2e-4
    c.train.warmup_steps = 5000
    c.train.ema_decay = 0.9999
    c.train.log_every = 1000
    c.train.ckpt_every = 10_000
    c.sample.num = 64
    # The learned sampler at the reference settings (the policy at full width, the whole batch probed), except the
    # sweep stride of 4 (reference: 1), which is most of an update's cost.
    c.sampler.policy_channels = (32, 64, 128)
    c.sampler.policy_hidden = (256, 256)
    c.sampler.probe_batch_size = -1
    c.sampler.sweep_stride = 4
    return c
