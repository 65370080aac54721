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

    c.sampler = ml_collections.ConfigDict()
    c.sampler.name = "adaptive"  # the learned sampler (samplers/adaptive.py); uniform | adaptive
    # Fields of the adaptive sampler; reference values (ku-dmlab/Adaptive-Timestep-Sampler) unless said otherwise.
    c.sampler.num_selected = 3  # |S|
    c.sampler.update_every = 40  # f_S: policy update every f_S steps
    c.sampler.buffer_size = 20  # rows of the sweep ring buffer
    c.sampler.policy_lr = 1e-2
    c.sampler.policy_b1 = 0.9
    c.sampler.policy_b2 = 0.999
    c.sampler.policy_grad_clip = 1.0
    c.sampler.entropy_coef = 1e-2
    # standard: -E[log pi R] - c H (method.md 1.4); reference: -E[log pi (R + c H)], H not detached.
    c.sampler.entropy_form = "standard"
    # The changes below keep a step with this sampler within 1.10x of a uniform step, amortised over f_S, on this
    # small model (benchmarks/throughput.py on 2 CPU cores, README): with a 64-image probe and a stride of 10 the
    # ratio measured 1.09x-1.14x, with these 1.074x and 1.076x. configs/cifar10.py keeps the reference probe.
    # Sweep every 20th timestep (reference: all T): the sweep is most of an update's cost; S is then chosen among the
    # timesteps 0, 20, 40, ...
    c.sampler.sweep_stride = 20
    c.sampler.sweep_images = 1  # images whose sweeps are averaged (reference: 1)
    # Images probed for the reward, spread evenly over the batch (reference: -1, the whole batch).
    c.sampler.probe_batch_size = 32
    # Changed from the reference (fresh noise after the update): the same noise and dropout masks before and after
    # the update remove the noise's own variance from the reward without biasing it (common random numbers).
    c.sampler.common_noise = True
    c.sampler.probe_dropout = True  # probe in train mode, dropout on (reference)
    # Probes run the network on at most this many rows at a time (0: all at once). Not in the reference. Measured on
    # 2 CPU cores: 32-row chunks make an update step faster than 128-row ones and remove the cost that the update
    # branch's scratch memory put on every other step (XLA sizes it for the largest branch).
    c.sampler.probe_chunk_rows = 32
    # A quarter of the reference policy's width (32, 64, 128 / 256, 256): its forward pass runs on every step, and at
    # full width it costs about 10% of this 280k-parameter UNet's step (9.8 ms per 128 images on one core). Measured
    # amortised ratio with (16, 32, 64 / 128, 128): 1.136x; with this width: 1.09x (README).
    c.sampler.policy_channels = (8, 16, 32)
    c.sampler.policy_hidden = (64, 64)

    c.weighting = ml_collections.ConfigDict()
    c.weighting.name = "none"

    c.sample = ml_collections.ConfigDict()
    c.sample.num = 64
    c.sample.method = "ancestral"  # ancestral | ddim
    c.sample.ddim_steps = 100

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # devices on the data axis; -1: all
    # On a CPU-only host main.py splits the CPU into this many XLA devices before JAX starts (-1: one per core, the
    # largest count that divides the batch): XLA runs these small convolutions on one thread per device, so
    # data parallelism over per-core devices is what uses every core. Ignored when XLA_FLAGS sets the count.
    c.mesh.cpu_devices = -1

    c.diagnostics = ml_collections.ConfigDict()
    c.diagnostics.t_bins = 50  # bins of the timestep histogram and the per-timestep loss
    return c
