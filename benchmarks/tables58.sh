#!/usr/bin/env bash
# Which time sampler for a masked diffusion LM? (docs/method.md#time-samplers-on-the-masked-process) The text config
# (configs/text.py: MD4's masked diffusion with the linear schedule, the 1.28M-parameter token transformer with RoPE, the bundled
# King James Bible, 750 steps of 32 x 128 characters) with every time sampler that has a meaning on the masked
# process, each paired with uniform t on the same seeds: antithetic (MD4's default), Hong et al.'s bell over the
# masking rate (samplers/bell.py, Beta(3, 3): weight 1, and with importance weights and a 0.1 uniform floor), the
# logit-normal(0, 1) over the masking rate (the other bell, weight 1), the adaptive noise schedule and loss-second-
# moment sampling (P-POTS's rule; both unbiased), and the learned sampler (its default, weight 1, and with importance
# weights). Every arm is scored on the same NELBO with uniform t: --mode=eval's stratified estimate over 256 test
# sequences, 32 stratified times each (the same sequences, times and masks in every arm of a seed), in bits per
# character (the table says bits per token: a token is a character here), with its standard error; steps and
# wall-clock to uniform's final periodic NELBO (128 validation sequences, 8 times, every 250 steps). Beside it the
# autoregressive transformer of the same size (configs/text.py:ar), its exact NLL on the same test sequences.
# Sized on 2026-12-07 (docs/benchmarks/text.md#sizing-the-masked-diffusion-lm-table-2026-12-07): about 5 to 6.5 minutes a
# run on a free core (the learned sampler's 6 to 7), evaluation 15 to 20% of it; the pilot's 27 runs 2.5 to 3 h, the
# AR baseline's 3 about 15 minutes.
# The pilot is seeds 0-2; size the confirmation from it (python benchmarks/samplers.py --size_from=$OUT/bench_text58)
# and run it on fresh seeds (10 on), as many as the MDD needs and at least 6.
# One run at a time on one core, resumable (finished runs are skipped; records in benchmarks/records/text58 and
# text58_ar let a clean clone continue):
#   taskset -c 1 bash benchmarks/tables58.sh [OUT]      (OUT: workdirs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-workdirs}
arms=uniform,antithetic,bell,bell/importance_weights=True/uniform_mix=0.1,logitnormal,adaptive_noise
arms+=,loss_second_moment,adaptive,adaptive/importance_weights=True
# the final evaluation: 256 test sequences (of 1,934) and 8 text samples; 32 stratified times (configs/text.py's
# default, written here too: likelihood_steps defines a run, set before training)
evaluation=(--set eval.nll_images=256 --set eval.num_samples=8)
python benchmarks/samplers.py --config=configs/text.py --every=250 --out="$out/bench_text58" \
  --records=benchmarks/records/text58 "${evaluation[@]}" --set diffusion.likelihood_steps=32 \
  --seeds=0,1,2 --runs=$arms
python benchmarks/samplers.py --config=configs/text.py:ar --every=250 --out="$out/bench_text58_ar" \
  --records=benchmarks/records/text58_ar "${evaluation[@]}" --seeds=0,1,2 --runs=uniform
# the pilot's table again (every run done: nothing trains), with the AR baseline's line under it
python benchmarks/samplers.py --config=configs/text.py --every=250 --out="$out/bench_text58" \
  --records=benchmarks/records/text58 "${evaluation[@]}" --set diffusion.likelihood_steps=32 \
  --seeds=0,1,2 --runs=$arms --beside="$out/bench_text58_ar"
