"""PeriodicEval: the cheap evaluation run every config.eval.periodic.every training steps (an unbiased stratified
estimate of the bound, FID/KID on few samples), with the same noise, timesteps and sample seeds at every evaluation
and in every run (common random numbers: differences between steps and runs are not evaluation noise). The training
loop (drivers/train.py) builds it from the run's Setup and calls it with the EMA parameters."""

import time

import jax

from data import DATASETS
from diffusion.base import Likelihood
from evaluation.bound import bound_bpd, test_data
from evaluation.quality import feature_space, fid_fingerprint, fid_tag, sample_quality


class PeriodicEval:
    """Every config.eval.periodic.every steps: scalars for metrics.jsonl / TensorBoard, named with their protocol:
    periodic/bpd_T{K} (the stratified bound estimate over K timesteps), periodic/fid_N{N}/{tag} and
    periodic/kid_N{N}/{tag} (tag: evaluation.quality.fid_tag of the feature network, its reference and a latent
    model's decoder: a run scored with another network logs another metric)."""

    KEY = 0x9E71  # fixed, not config.seed: every run is evaluated on the same noise and sample seeds

    def __init__(self, setup):
        c = setup.config
        self.setup, self.p = setup, c.eval.periodic
        # a dataset with a validation split (text, data/text.py) is evaluated there; the test split is --mode=eval's
        self.split = getattr(DATASETS[c.data.name], "periodic_split", "test")
        self.images, self.labels = test_data(setup, self.p.nll_images, self.split)
        self.space = feature_space(setup)[0]
        self.fingerprint = None if self.space is None else fid_fingerprint(setup, self.space)
        self.tag = None if self.space is None else fid_tag(self.fingerprint)
        self.bound = isinstance(setup.process, Likelihood)  # else FID alone (a process may offer either)
        self.key = jax.random.PRNGKey(self.KEY)
        self.prefix = "periodic/"

    def protocol(self) -> dict:
        p = self.p
        return dict(
            nll=None
            if not self.bound
            else f"bpd_T{p.nll_timesteps}: {self.setup.process.estimate_protocol(p.nll_timesteps)} over "
            f"{len(self.images)} {'test images' if self.split == 'test' else self.split + ' examples'}",
            fid=None
            if self.space is None
            else f"fid_N{p.num_samples}/{self.tag} / kid_N{p.num_samples}/{self.tag}: {p.num_samples} samples "
            f"({p.method}{f', {p.steps} steps' if self.setup.process.uses_steps(p.method) else ''}) in the "
            f"{self.space.name} space; {self.tag}: the hash of the feature network {self.fingerprint['network']}, "
            f"its reference {self.fingerprint['reference']}"
            + (f" and the decoder {self.fingerprint['decoder']}" if "decoder" in self.fingerprint else ""),
            parameters="EMA",
            note="cheap estimates for convergence curves, not --mode=eval numbers",
        )

    def __call__(self, params) -> dict:
        p, t0 = self.p, time.perf_counter()
        out = {}
        if self.bound:
            bpd, _, _ = bound_bpd(self.setup, params, self.images, self.key, num_t=p.nll_timesteps, labels=self.labels)
            out[f"{self.prefix}bpd_T{p.nll_timesteps}"] = bpd
        if self.space is not None:
            scores, _ = sample_quality(
                self.setup,
                self.space,
                params,
                jax.random.fold_in(self.key, 1),
                p.num_samples,
                p.method,
                p.steps,
                self.setup.config.eval.fid.guidance_scale,
            )
            out[f"{self.prefix}fid_N{p.num_samples}/{self.tag}"] = scores["fid"]
            if "kid" in scores:
                out[f"{self.prefix}kid_N{p.num_samples}/{self.tag}"] = scores["kid"]
        out[f"{self.prefix}seconds"] = time.perf_counter() - t0
        return out
