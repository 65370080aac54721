"""A masked diffusion language model on the bundled King James Bible (data/text.py, 27 characters): MD4's
continuous-time masked diffusion with the linear schedule (diffusion/masked.py), a 4-layer token transformer with
adaLN time conditioning (models/tokens.py), antithetic time (MD4's default), sequences of 128 characters.

    python main.py --config=configs/text.py --workdir=workdirs/text
    python main.py --config=configs/text.py --workdir=workdirs/text --mode=eval   # the test split's bound
    python main.py --config=configs/text.py:ar --workdir=workdirs/text_ar         # the autoregressive baseline

750 steps of 32 x 128 characters through the 1.28M-parameter network: about 4 minutes on one core of the development
machine (3.7 steps/s; 1.5x the time in a notebook kernel: docs/config.md#host-memory). Every 250 steps it writes the
validation NELBO in bits per character (periodic/bpd_T8 in metrics.jsonl and TensorBoard: 128 validation sequences,
8 stratified times, the same at every evaluation) and text samples (samples/step_NNNNNNN.txt, 8 samples of 128
ancestral steps) to the workdir; running the same command again resumes exactly. Seed 0 there: 3.22, 2.83 and 2.62
bits per character at steps 250, 500 and 750 (from log2 27 = 4.75; the letters' frequencies alone give about 4.0),
and --mode=eval's test bound 2.710 +- 0.005 over the 1,934 test sequences, 32 stratified times each, in 5 minutes
(docs/benchmarks/text.md#positions-why-the-token-transformer-rotates).
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
    if process == "masked":
        # the bound's diffusion term from 32 stratified times a sequence (unbiased; the standard error printed
        # beside it): the whole test split in about 5 minutes here, where 128 times took about 20
        c.diffusion.likelihood_steps = 32
    return c
