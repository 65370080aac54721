"""The fields of the config's sections that no registry owns (train, sample, eval, mesh, diagnostics) and the eval
section's checks. The registries' sections (data, model, diffusion, sampler, weighting) are declared by their parts
(config/registry.py); config/schema.py composes both. Every field of these sections may change when a run is
resumed, except train.weight_decay (it changes the optimizer state's structure).

    train        the optimizer, EMA, logging and checkpoints (training/state.py, drivers/train.py)
    sample       the grid written at the end of training (training/report.py)
    mesh         the device mesh (training/mesh.py)
    diagnostics  the timestep histogram's bins (training/step.py)
    eval         --mode=eval, FID/KID and the periodic evaluation (drivers/evaluate.py, evaluation/)
"""

import os

from config.fields import Bool, Choice, ConfigError, Int, Num, Path, all_mutable
from config.registry import LIKELIHOOD
from diffusion import PROCESSES
from evaluation.features import check_reference_stats, classifier_dataset
from evaluation.features import kind as fid_kind

# every registered process's sampling methods: the config fields accept these; validation keeps the configured
# process's own
ALL_METHODS = tuple(dict.fromkeys(m for name in PROCESSES.names() for m in getattr(PROCESSES[name], "methods", ())))

# Every train field may change when a run is resumed (a longer run, another learning rate).
TRAIN_FIELDS = all_mutable(
    dict(
        num_steps=Int(2000, 0),
        batch_size=Int(128, 1),
        lr=Num(1e-3, 0.0),  # higher than CIFAR's 2e-4: a 280k-parameter model on 1,500 images, trained for minutes
        warmup_steps=Int(100, 0),
        grad_clip=Num(1.0, 0.0),  # global-norm clipping threshold; 0: none (DiT, U-ViT, LDM clip nothing)
        b1=Num(0.9, 0.0, 1.0, hi_open=True),
        b2=Num(0.999, 0.0, 1.0, hi_open=True),
        ema_decay=Num(0.999, 0.0, 1.0),
        # EMA warm-up: decay min(ema_decay, (1 + n) / (10 + n)) at the n-th update, n = 1, 2, ... (ema_decay_at)
        ema_warmup=Bool(False),
        log_every=Int(100, 1),
        ckpt_every=Int(1000, 1),
        keep_checkpoints=Int(3, 1),
        # with several processes, steps between checks for a stop signal (SIGTERM, Ctrl-C) that every process agrees on;
        # a stop then waits for the next multiple (a preemption notice gives tens of seconds)
        stop_check_every=Int(10, 1),
    )
)
# Decoupled weight decay (AdamW) of the published latent runs (U-ViT 0.03, LDM 0.01; DiT 0). It changes the
# optimizer state's structure, so it defines the run (not mutable); 0 is plain Adam.
TRAIN_FIELDS["weight_decay"] = Num(0.0, 0.0)


# The sample grid written at the end of training (EMA parameters).
SAMPLE_FIELDS = all_mutable(
    dict(
        num=Int(64, 1),
        # DDPM: ancestral (all T steps) | ddim; continuous time (vp, flow): ancestral | euler | heun
        method=Choice("ancestral", ALL_METHODS),
        # sampler steps of every method but the DDPM chain's ancestral one (which runs all T): ddim, and euler, heun
        # and ancestral in continuous time (heun: 2 n - 1 network evaluations); ddim_steps is its old name
        steps=Int(100, 1, "T", aliases=("ddim_steps",)),
        # classifier-free guidance scale of a class-conditional model (1: conditional; 0: unconditional)
        guidance_scale=Num(1.0, 0.0),
    )
)


MESH_FIELDS = all_mutable(
    dict(
        data=Int(-1, 1, extra=(-1,)),  # devices on the data axis; -1: all
        # Shard parameters, optimizer moments and EMA over the data axis (FSDP-style) instead of replicating them: for
        # models whose state does not fit a device several times over. Same results, more communication.
        shard_params=Bool(False),
        # On a CPU-only host main.py splits the CPU into this many XLA devices before JAX starts (-1: one per core, the
        # largest count that divides the batch): XLA runs these small convolutions on one thread per device, so
        # data parallelism over per-core devices is what uses every core. Ignored when XLA_FLAGS sets the count.
        cpu_devices=Int(-1, 1, extra=(-1,)),
    )
)


DIAGNOSTICS_FIELDS = all_mutable(
    dict(
        t_bins=Int(50, 1, "T"),  # bins of the timestep histogram and the per-timestep loss
    )
)

FID_FIELDS = dict(
    num_samples=Int(1000, 2),  # generated images per FID (paper tables: 50,000 on CIFAR-10)
    # DDPM: ancestral (all T steps, the paper's protocol) | ddim; continuous time: ancestral | euler | heun
    method=Choice("ddim", ALL_METHODS),
    steps=Int(100, 1, "T", aliases=("ddim_steps",)),  # sampler steps, as config.sample.steps
    batch_size=Int(1000, 1),  # samples per sampling call (chunk i seeded fold_in(key, i); one call: the key)
    guidance_scale=Num(1.0, 0.0),  # classifier-free guidance of a class-conditional model (periodic FID too)
    kid_subsets=Int(100, 1),  # KID: mean over this many subsets ...
    kid_subset_size=Int(1000, 2),  # ... of this many features from each set (capped at the smaller set)
    # auto: the embedded datasets' classifiers (digits, MNIST), else inception with weights; none: no FID / KID
    features=Choice("auto", ("auto", "classifier", "inception", "none")),
    inception_weights=Path(""),  # pytorch-fid's pt_inception-2015-12-05-6726825d.pth (or an .npz of it)
    reference_stats=Path(""),  # .npz of mu, sigma (and features) of the dataset: python -m evaluation.reference
    classifier_cache=Path(""),  # folder of the digits classifier's cached weights ("": ~/.cache/adaptive-timesteps)
)

# Periodic evaluation during training, on the EMA parameters: cheap estimates for convergence curves, labelled
# "periodic/" in metrics.jsonl and TensorBoard; not the numbers of --mode=eval.
PERIODIC_FIELDS = dict(
    every=Int(500, 0),  # steps (0: off)
    nll_images=Int(-1, 1, extra=(-1,)),  # test images in the bound estimate (-1: all)
    # t = 0 plus one random t in each of 49 geometric strata of 1..T-1; vp: stratified times of the ELBO; flow: Heun
    # steps of the ODE likelihood
    nll_timesteps=Int(50, 2, "T"),
    num_samples=Int(250, 2),  # generated images for the periodic FID/KID
    method=Choice("ddim", ALL_METHODS),
    steps=Int(50, 1, "T", aliases=("ddim_steps",)),  # sampler steps, as config.sample.steps
)

# --mode=eval (drivers/evaluate.py): the latest checkpoint's EMA parameters.
EVAL_FIELDS = all_mutable(
    dict(
        nll_images=Int(-1, 1, extra=(-1,)),  # test images in the bits/dim (-1: the whole test split)
        batch_size=Int(128, 1),  # images per bound evaluation (rounded up to the device count)
        chunk_rows=Int(8192, 0),  # network rows per call inside the bound (image x timestep pairs; memory bound)
        # 0: the full bound (all T timesteps). K > 0: its unbiased stratified estimate with its standard error
        # (docs/evaluation.md#test-bitsdim): DDPM: t = 0 with bound_decoder_draws noise draws, then K geometric strata
        # of 1..T-1 with bound_per_stratum timesteps each; vp: the reconstruction term, then K cells of the diffusion
        # loss; not for the ODE likelihood (flow, edm)
        bound_strata=Int(0, 0),
        bound_per_stratum=Int(2, 2, note="(two at least, for the standard error)"),
        bound_decoder_draws=Int(32, 2, note="(two at least, for the standard error)"),
        num_samples=Int(64, 1),  # samples in the eval grid
        # FID and KID (evaluation/): for the digits in the feature space of a small classifier trained on them (cached);
        # for other datasets with the FID InceptionV3 from a weights file (docs/evaluation.md#fid-and-kid; nothing is
        # downloaded).
        fid=FID_FIELDS,
        periodic=PERIODIC_FIELDS,
    )
)


def _require(ok, field, value, allowed):
    if not ok:
        raise ConfigError(f"config.{field}={value!r} is not allowed: {allowed}")


def check_eval(config):
    """What the bound's and the FID fields need of each other, of the process, of the dataset and of the files
    they name."""
    strata = config.eval.bound_strata
    if strata and LIKELIHOOD in PROCESSES[config.diffusion.name].offers(config.diffusion):
        problem = PROCESSES[config.diffusion.name].strata_problem(config.diffusion, strata)
        _require(
            problem is None,
            "eval.bound_strata",
            strata,
            f"{problem} (config.diffusion.name={config.diffusion.name!r})",
        )
    f, p = config.eval.fid, "eval.fid."
    _require(
        f.features != "classifier" or classifier_dataset(config),
        p + "features",
        f.features,
        f"the classifiers are trained on the embedded digits and MNIST; config.data.name is {config.data.name!r}",
    )
    weights, stats = f.inception_weights, f.reference_stats
    _require(
        f.features != "inception" or weights,
        p + "features",
        f.features,
        "needs config.eval.fid.inception_weights (docs/evaluation.md#fid-and-kid)",
    )

    def exists(path):
        return "://" in path or os.path.isfile(path)

    _require(
        not weights or exists(weights),
        p + "inception_weights",
        weights,
        "no such file (pytorch-fid's pt_inception-2015-12-05-6726825d.pth; docs/evaluation.md#fid-and-kid)",
    )
    if fid_kind(config) == "inception":
        _require(
            stats != "",
            p + "reference_stats",
            stats,
            "must be set with config.eval.fid.inception_weights: "
            "the dataset's statistics, made by `python -m evaluation.reference` (docs/evaluation.md#fid-and-kid)",
        )
    _require(
        not stats or exists(stats),
        p + "reference_stats",
        stats,
        "no such file (make it with `python -m evaluation.reference`; docs/evaluation.md#fid-and-kid)",
    )
    if stats and "://" not in stats and fid_kind(config) != "classifier":
        problem = check_reference_stats(config)
        _require(problem is None, p + "reference_stats", stats, problem)
