"""Default: a DDPM on the embedded handwritten digits (8x8, 1 channel), small enough for a laptop CPU, trained with
the learned timestep sampler (samplers/adaptive.py).

    python main.py --config=configs/default.py --workdir=/tmp/digits

About 7 minutes of one CPU core, compile included (the median of benchmarks/records/ddpm22); leaves samples/,
timesteps.png and per_timestep_loss.png in the workdir. Seed 0 ends at periodic/bpd_T50 4.83 and periodic/fid_N250
0.27 (ten seeds: 4.72 to 4.84 and 0.23 to 0.35); since 2026-12-08 the FID is logged as periodic/fid_N250/6a4ec479,
the tag naming its feature network (docs/evaluation.md).
Override any field, e.g. --config.train.num_steps=500 --config.sampler.name=uniform.

Every field, its default, type and range is declared by the part or section that owns it (config/schema.py lists
them): the dataset (data/), the model (models/), the diffusion process (diffusion/), the timestep sampler
(samplers/, one sub-config per sampler: config.sampler.<name>.*), the loss weighting (weightings/), train
(training/state.py), sample (training/report.py), eval (config/sections.py), mesh (training/mesh.py) and
diagnostics (training/step.py). This file only picks the parts and the values that differ from their defaults.
"""

from config.schema import default_config


def get_config():
    # The sampler and the weighting are separate axes: any sampler combines with any weighting.
    c = default_config(data="digits", model="unet", diffusion="ddpm", sampler="adaptive", weighting="none")
    # EMA warm-up (training/state.py ema_decay_at): a 2,000-step run's EMA would otherwise still weigh the random
    # initialisation at the end (0.999^2000 = 0.14) and its evaluation curves rise before they fall
    c.train.ema_warmup = True
    return c
