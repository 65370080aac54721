"""CIFAR-10 as in the reference set-up (docs/method.md#reference-set-up-and-results): 35.7M-parameter DDPM UNet,
T = 1000, eps-prediction,
fixed-large variance, Adam 2e-4 with 5000 warm-up steps, clip 1.0, EMA 0.9999, batch 128, 800k steps.

The paper's CIFAR-10 runs are variants of this one config, chosen by an argument "SCHEDULE,METHOD":

    python main.py --config=configs/cifar10.py:quad,adaptive --workdir=gs://BUCKET/c10-quad-adaptive \
        --config.data.data_dir=DIR

SCHEDULE: linear | cosine | quad (default quad, the reference code's). METHOD (default adaptive):
    uniform            uniform timesteps, unweighted eps-MSE (DDPM)
    p2                 uniform timesteps, P2 weighting (gamma 1, k 1)
    min_snr            uniform timesteps, Min-SNR-5 weighting
    lognormal          EDM log-normal noise levels (nearest sigma_t), unweighted
    speed              SpeeD: asymmetric + dual sampling (k 5, tau 700) and change-aware weighting (lam 0.6)
    adaptive           the learned sampler (Kim et al.), unweighted
    adaptive+min_snr   the learned sampler with Min-SNR-5 weighting
The paper reports (linear, 1.0M iterations, FID-50k): adaptive 2.94, uniform 3.19, Min-SNR 3.16
(docs/method.md#reference-set-up-and-results).
The data must be prepared beforehand (no download at run time): see docs/config.md#datasets.
"""

from config.variants import Slot, parse_variant
from configs import default
from configs.published import METHODS
from data import DATASETS

SCHEDULES = ("linear", "cosine", "quad")


def get_config(variant: str = ""):
    schedule, method = parse_variant(
        "cifar10.py",
        variant,
        [Slot(SCHEDULES, "quad"), Slot(tuple(METHODS), "adaptive")],
        f"SCHEDULE,METHOD with SCHEDULE one of {', '.join(SCHEDULES)} and METHOD one of {', '.join(METHODS)}",
    )
    c = default.get_config()
    c.data = DATASETS.default_config("cifar10")  # 32x32x3, random horizontal flips (data/tfds.py)
    c.model.ch = 128
    c.model.ch_mult = (1, 2, 2, 2)
    c.model.num_res_blocks = 2
    c.model.attn_resolutions = (16,)
    c.model.dropout = 0.1
    c.model.num_groups = 32
    c.diffusion.schedule = schedule
    c.train.num_steps = 800_000
    c.train.lr = 2e-4
    c.train.warmup_steps = 5000
    c.train.ema_decay = 0.9999
    c.train.log_every = 1000
    c.train.ckpt_every = 10_000
    c.sample.num = 64
    c.sampler.name, c.weighting.name = METHODS[method]
    # The learned sampler at the reference settings (the policy at full width, the whole batch probed), except the
    # sweep stride of 4 (reference: 1), which is most of an update's cost.
    c.sampler.adaptive.policy_channels = (32, 64, 128)
    c.sampler.adaptive.policy_hidden = (256, 256)
    c.sampler.adaptive.probe_batch_size = -1
    c.sampler.adaptive.sweep_stride = 4
    # --mode=eval as the paper: FID-50k, 1000-step ancestral sampling, EMA, against the training set's Inception
    # statistics (config.eval.fid.inception_weights / reference_stats: docs/evaluation.md#fid-and-kid).
    # Without them no FID is computed.
    c.eval.fid.num_samples = 50_000
    c.eval.fid.method = "ancestral"
    # Periodic curves: the bound estimate on 1,000 test images and FID on 1,000 DDIM-50 samples every 20k steps.
    c.eval.periodic.every = 20_000
    c.eval.periodic.nll_images = 1000
    c.eval.periodic.num_samples = 1000
    return c
