#!/usr/bin/env bash
# The text table's confirmation on fresh seeds (docs/benchmarks/text.md): the arms chosen on the pilot of
# benchmarks/tables58.sh (seeds 0-2), beside uniform t and MD4's default, on seeds the choice never saw (10-15), with
# the AR baseline of the same size on the same seeds. The same config, evaluation and records layout as the pilot.
# Chosen on the pilot (2026-12-07, paired against uniform, 2.758 bits per character): Hong et al.'s bell over the
# masking rate, Beta(3, 3) with weight 1 (-0.220 [-0.353, -0.087], MDD 0.166, lower in 3 of 3) and the
# logit-normal(0, 1), weight 1 (-0.247 [-0.459, -0.035], MDD 0.264, lower in 3 of 3); antithetic t (MD4's default,
# +0.047, MDD 0.263) stays as the rival a masked-LM user would switch from (--rivals: every arm paired with it too).
# Not confirmed: the adaptive noise schedule (+0.001, MDD 0.274), loss-second-moment sampling (+0.073, 0.195), the
# learned sampler (+0.068, 0.342; with importance weights +0.056, 0.195): none lower than uniform on the pilot, and
# none can be recommended over the bells whatever fresh seeds say (each is an unbiased estimate of uniform's
# objective or, the learned default, a walk that stayed within 0.01 TV of uniform); the bell with importance weights
# (+0.249, higher in 3 of 3) neither.
# Sizing (python benchmarks/samplers.py --size_from=$OUT/bench_text58): the bells' differences are 1.3 and 0.9
# times their MDD at 3 seeds; at 6 seeds, with the pilot's spread (sd of d 0.054 and 0.085), the MDD is about 0.08
# and 0.12 bits per character: 6 seeds resolve both, and say how far antithetic is from uniform to within 0.12.
# 4 arms x 6 seeds, about 5 minutes a run on a free core (2 h), and the AR baseline's 6 runs (30 min).
# One run at a time on one core, resumable (records in benchmarks/records/text58c and text58c_ar):
#   taskset -c 1 bash benchmarks/tables58c.sh [OUT]      (OUT: workdirs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-workdirs}
seeds=10,11,12,13,14,15
arms=uniform,antithetic,bell,logitnormal
evaluation=(--set eval.nll_images=256 --set eval.num_samples=8)
text() { python benchmarks/samplers.py --config=configs/text.py --every=250 --out="$out/bench_text58c" \
  --records=benchmarks/records/text58c "${evaluation[@]}" --set diffusion.likelihood_steps=32 \
  --seeds=$seeds --runs=$arms --rivals=antithetic "$@"; }
text
python benchmarks/samplers.py --config=configs/text.py:ar --every=250 --out="$out/bench_text58c_ar" \
  --records=benchmarks/records/text58c_ar "${evaluation[@]}" --seeds=$seeds --runs=uniform
# the table again (every run done: nothing trains), with the AR baseline's line under it and, added after the
# table was first seen (so not a planned comparison: docs/benchmarks/text.md), the two bells against each other
text --beside="$out/bench_text58c_ar" --rivals=antithetic,bell
