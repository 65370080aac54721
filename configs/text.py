"""A masked diffusion language model on the bundled King James Bible (data/text.py, 27 characters): MD4's
continuous-time masked diffusion with the linear schedule (diffusion/masked.py), a 4-layer token transformer with
adaLN time conditioning (models/tokens.py), antithetic time (MD4's default), sequences of 128 characters.

    python main.py --config=configs/text.py --workdir=workdirs/text
    python main.py --config=configs/text.py --workdir=workdirs/text --mode=eval   # the test split's bound
    python main.py --config=configs/text.py:ar --workdir=workdirs/text_ar         # the autoregressive baseline

Sized for about 15 minutes on one CPU core: 750 steps of 32 x 128 characters through the 0.8M-parameter network
(about 23 GFLOP a step, forward and backward). Every 250 steps it writes the validation NELBO in bits per character
(periodic/bpd_T8 in metrics.jsonl and TensorBoard: 128 validation sequences, 8 stratified times, the same at every
evaluation) and text samples (samples/step_NNNNNNN.txt, 8 samples of 128 ancestral steps) to the workdir; running
the same command again resumes exactly. The first steps learn the letter frequencies (about 4.0 bits per
character, from log2 27 = 4.75); context comes after.
"""

from config.schema import default_config
from config.variants import Slot, parse_variant


def get_config(variant: str = ""):
    (kind,) = parse_variant(
        "text.py", variant, [Slot(("ar",), "", optional=True)], "configs/text.py or configs/text.py:ar"
    )
    process = "autoregressive" if kind == "ar" else "masked"
    c = default_config(data="kjv", model="tokens", diffusion=process, sampler="antithetic", weighting="none")
    c.model.causal = kind == "ar"  # the same network, causal: the baseline of the same size
    c.data.seq_len = 128
    c.train.batch_size = 32
    c.train.num_steps = 750
    c.train.lr = 1e-3
    c.train.warmup_steps = 100
    c.train.ema_warmup = True
    c.train.grad_clip = 1.0
    for section in (c.sample, c.eval.fid, c.eval.periodic):
        section.method = "ancestral"
        section.steps = 128  # ancestral steps: one network call each
    c.sample.num = 8
    c.eval.fid.features = "none"  # no FID of text
    c.eval.periodic.every = 250
    c.eval.periodic.nll_images = 128
    c.eval.periodic.nll_timesteps = 8
    c.eval.nll_images = -1  # --mode=eval: the whole test split
    return c
