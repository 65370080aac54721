"""The learned sampler at the reference code's own settings (ku-dmlab/Adaptive-Timestep-Sampler) on the embedded
digits: the whole batch probed, a sweep over every timestep (stride 1), the full-width policy (32, 64, 128 / 256,
256), and the reference's 1,062,497-parameter network for 8x8 images (UNet ch 32, ch_mult (1, 2, 2), one res block,
attention only in the middle block). What benchmarks/throughput.py measures the learned sampler's overhead on:

    python benchmarks/throughput.py --configs=digits_reference

Trains like configs/default.py otherwise (python main.py --config=configs/digits_reference.py --workdir=DIR).
"""

from configs import default


def get_config():
    c = default.get_config()
    c.model.ch = 32
    c.model.attn_resolutions = ()
    a = c.sampler.adaptive
    a.probe_batch_size = -1
    a.sweep_stride = 1
    a.policy_channels = (32, 64, 128)
    a.policy_hidden = (256, 256)
    return c
