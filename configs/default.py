"""Default: a DDPM on the embedded handwritten digits (8x8, 1 channel), small enough for a laptop CPU.

    python main.py --config=configs/default.py --workdir=/tmp/digits

About 4 minutes on 2 CPU cores; leaves samples/, timesteps.png and per_timestep_loss.png in the workdir.
Override any field, e.g. --config.train.num_steps=500 --config.sampler.name=uniform.
"""
import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.seed = 0

    c.data = ml_collections.ConfigDict()
    c.data.name = "digits"  # digits | cifar10 | celeb_a_hq | imagenet32 | imagenet64 | digits_tfds
    c.data.data_dir = ""  # tensorflow-datasets folder for everything but the embedded digits
    c.data.image_size = 8
    c.data.channels = 1

    c.model = ml_collections.ConfigDict()
    # 280k parameters: sized so that a step at batch 128 runs at >= 10 steps/s on 2 CPU cores (README).
    c.model.ch = 16
    c.model.ch_mult = (1, 2, 2)
    c.model.num_res_blocks = 1
    c.model.attn_resolutions = (4,)
    c.model.dropout = 0.1
    c.model.num_groups = 4
    c.model.dtype = "float32"  # compute dtype; parameters and optimizer state stay float32

    c.diffusion = ml_collections.ConfigDict()
    c.diffusion.schedule = "linear"  # linear | cosine | quad
    c.diffusion.num_timesteps = 1000
    c.diffusion.target = "eps"  # eps | x0 | v
    c.diffusion.variance = "fixed_large"  # fixed_large | fixed_small

    c.train = ml_collections.ConfigDict()
    c.train.num_steps = 2000
    c.train.batch_size = 128
    c.train.lr = 1e-3  # higher than CIFAR's 2e-4: a 150k-parameter model on 1,500 images, trained for minutes
    c.train.warmup_steps = 100
    c.train.grad_clip = 1.0
    c.train.b1 = 0.9
    c.train.b2 = 0.999
    c.train.ema_decay = 0.999
    c.train.log_every = 100
    c.train.ckpt_every = 1000
    c.train.keep_checkpoints = 3

    # The timestep sampler (samplers/) and the loss weighting (weightings/) are separate axes: any sampler combines
    # with any weighting. Each has its own sub-config, read only when it is the one named.
    c.sampler = ml_collections.ConfigDict()
    # uniform | antithetic | speed | lognormal | logitnormal | loss_second_moment | grad_variance | adaptive
    c.sampler.name = "adaptive"  # the learned sampler (samplers/adaptive.py)

    a = c.sampler.adaptive = ml_collections.ConfigDict()
    # Reference values (ku-dmlab/Adaptive-Timestep-Sampler) unless said otherwise.
    a.num_selected = 3  # |S|
    a.update_every = 40  # f_S: policy update every f_S steps
    a.buffer_size = 20  # rows of the sweep ring buffer
    a.policy_lr = 1e-2
    a.policy_b1 = 0.9
    a.policy_b2 = 0.999
    a.policy_grad_clip = 1.0
    a.entropy_coef = 1e-2
    # standard: -E[log pi R] - c H (method.md 1.4); reference: -E[log pi (R + c H)], H not detached.
    a.entropy_form = "standard"
    # The changes below keep a step with this sampler within 1.10x of a uniform step, amortised over f_S, on this
    # small model (benchmarks/throughput.py on 2 CPU cores, README): with a 64-image probe and a stride of 10 the
    # ratio measured 1.09x-1.14x, with these 1.074x and 1.076x. configs/cifar10.py keeps the reference probe.
    # Sweep every 20th timestep (reference: all T): the sweep is most of an update's cost; S is then chosen among the
    # timesteps 0, 20, 40, ...
    a.sweep_stride = 20
    a.sweep_images = 1  # images whose sweeps are averaged (reference: 1)
    # Images probed for the reward, spread evenly over the batch (reference: -1, the whole batch).
    a.probe_batch_size = 32
    # Changed from the reference (fresh noise after the update): the same noise and dropout masks before and after
    # the update remove the noise's own variance from the reward without biasing it (common random numbers).
    a.common_noise = True
    a.probe_dropout = True  # probe in train mode, dropout on (reference)
    # Probes run the network on at most this many rows at a time (0: all at once). Not in the reference. Measured on
    # 2 CPU cores: 32-row chunks make an update step faster than 128-row ones and remove the cost that the update
    # branch's scratch memory put on every other step (XLA sizes it for the largest branch).
    a.probe_chunk_rows = 32
    # A quarter of the reference policy's width (32, 64, 128 / 256, 256): its forward pass runs on every step, and at
    # full width it costs about 10% of this 280k-parameter UNet's step (9.8 ms per 128 images on one core). Measured
    # amortised ratio with (16, 32, 64 / 128, 128): 1.136x; with this width: 1.09x (README).
    a.policy_channels = (8, 16, 32)
    a.policy_hidden = (64, 64)

    # SpeeD (samplers/speed.py): p(t) = k / (T + tau (k - 1)) below tau, 1 / (T + tau (k - 1)) above, plus duals.
    c.sampler.speed = ml_collections.ConfigDict(dict(k=5.0, tau=700))  # SpeeD's experiment configs (FFHQ: k = 2)
    # EDM log-normal noise levels mapped to the nearest sigma_t (samplers/lognormal.py).
    c.sampler.lognormal = ml_collections.ConfigDict(dict(mean=-1.2, std=1.2))
    # SD3 logit-normal density on the noise level sqrt(1 - alpha_bar) (samplers/logitnormal.py).
    c.sampler.logitnormal = ml_collections.ConfigDict(dict(mean=0.0, std=1.0))
    # improved-diffusion's importance sampling (samplers/loss_second_moment.py).
    c.sampler.loss_second_moment = ml_collections.ConfigDict(dict(history=10, uniform_prob=0.001))
    # The paper's negative ablation (samplers/grad_variance.py); the estimator is ours, written down there.
    c.sampler.grad_variance = ml_collections.ConfigDict(dict(
        num_bins=20, update_every=40, decay=0.9, uniform_prob=0.001, importance_weights=False))

    c.weighting = ml_collections.ConfigDict()
    c.weighting.name = "none"  # none | p2 | min_snr | speed
    c.weighting.p2 = ml_collections.ConfigDict(dict(gamma=1.0, k=1.0))  # 1 / (k + SNR)^gamma
    c.weighting.min_snr = ml_collections.ConfigDict(dict(gamma=5.0))  # form follows config.diffusion.target
    # SpeeD's change-aware weighting; tau as config.sampler.speed.tau for SpeeD as published.
    c.weighting.speed = ml_collections.ConfigDict(dict(lam=0.6, tau=700))

    c.sample = ml_collections.ConfigDict()
    c.sample.num = 64
    c.sample.method = "ancestral"  # ancestral | ddim
    c.sample.ddim_steps = 100

    # --mode=eval (training/evaluate.py): the latest checkpoint's EMA parameters.
    c.eval = ml_collections.ConfigDict()
    c.eval.nll_images = -1  # test images in the bits/dim (-1: the whole test split)
    c.eval.batch_size = 128  # images per bound evaluation (rounded up to the device count)
    c.eval.chunk_rows = 8192  # network rows per call inside the bound (image x timestep pairs; memory bound)
    c.eval.num_samples = 64  # samples in the eval grid
    # FID and KID (evaluation/): for the digits in the feature space of a small classifier trained on them (cached);
    # for other datasets with the FID InceptionV3 from a weights file (README: FID; nothing is downloaded).
    c.eval.fid = ml_collections.ConfigDict()
    c.eval.fid.num_samples = 1000  # generated images per FID (paper tables: 50,000 on CIFAR-10)
    c.eval.fid.method = "ddim"  # ancestral (all T steps, the paper's protocol) | ddim
    c.eval.fid.ddim_steps = 100
    c.eval.fid.batch_size = 1000  # samples per sampling call (chunk i seeded fold_in(key, i); one call: the key)
    c.eval.fid.kid_subsets = 100  # KID: mean over this many subsets ...
    c.eval.fid.kid_subset_size = 1000  # ... of this many features from each set (capped at the smaller set)
    c.eval.fid.features = "auto"  # auto (digits: classifier, else inception if weights) | classifier | inception
    c.eval.fid.inception_weights = ""  # pytorch-fid's pt_inception-2015-12-05-6726825d.pth (or an .npz of it)
    c.eval.fid.reference_stats = ""  # .npz of mu, sigma (and features) of the dataset: python -m evaluation.reference
    c.eval.fid.classifier_cache = ""  # folder of the digits classifier's cached weights ("": ~/.cache/adaptive-timesteps)
    # Periodic evaluation during training, on the EMA parameters: cheap estimates for convergence curves, labelled
    # "periodic/" in metrics.jsonl and TensorBoard; not the numbers of --mode=eval.
    c.eval.periodic = ml_collections.ConfigDict()
    c.eval.periodic.every = 500  # steps (0: off)
    c.eval.periodic.nll_images = -1  # test images in the bound estimate (-1: all)
    c.eval.periodic.nll_timesteps = 50  # t = 0 plus one random t in each of 49 geometric strata of 1..T-1
    c.eval.periodic.num_samples = 250  # generated images for the periodic FID/KID
    c.eval.periodic.method = "ddim"
    c.eval.periodic.ddim_steps = 50

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # devices on the data axis; -1: all
    # Shard parameters, optimizer moments and EMA over the data axis (FSDP-style) instead of replicating them: for
    # models whose state does not fit a device several times over. Same results, more communication.
    c.mesh.shard_params = False
    # On a CPU-only host main.py splits the CPU into this many XLA devices before JAX starts (-1: one per core, the
    # largest count that divides the batch): XLA runs these small convolutions on one thread per device, so
    # data parallelism over per-core devices is what uses every core. Ignored when XLA_FLAGS sets the count.
    c.mesh.cpu_devices = -1

    c.diagnostics = ml_collections.ConfigDict()
    c.diagnostics.t_bins = 50  # bins of the timestep histogram and the per-timestep loss
    return c
