#!/usr/bin/env bash
# How much can a choice of time distribution gain? The ceiling of a static weighting (docs/benchmarks/ceilings.md): a
# grid of fixed Beta distributions of t / T (samplers/beta.py, no importance weights: each one re-weights the
# objective), on DDPM and flow matching, 3 pilot seeds, beside uniform and the adaptive noise schedule of the same
# seeds. The grid's points are the ends the learned policy's walks reached on the pilots of the last tables
# (Beta(0.5, 2) on flow, Beta(0.34, 3.3) on DDPM seed 2: docs/benchmarks/reward.md#what-the-reward-carries) and their
# mirror images toward t = T.
# Uniform and the schedule run again here rather than being copied from benchmarks/records/ddpm36 and flow36: those
# ran on another machine (XLA's CPU code differs between processors) and DDPM's final bound there is the full bound,
# here its stratified estimate, as in the confirmation tables.
# One run at a time on one core, resumable (finished runs are skipped; records in benchmarks/records/{ddpm56,flow56}
# let a clean clone continue):
#   taskset -c 1 bash benchmarks/tables56.sh [OUT]      (OUT: workdirs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-workdirs}
grid="uniform,beta/a=0.5/b=2.0,beta/a=0.34/b=3.3,adaptive_noise,beta/a=2.0/b=0.5,beta/a=3.3/b=0.34"
# On the chain also the bound's own weighting (weightings/likelihood.py), the objective the bound is: with uniform t,
# and unbiased under the two loss-driven proposals (Improved DDPM's recipe is the loss-second-moment one); and two
# points beyond Beta(0.34, 3.3) toward t = 0, where DDPM seed 0 of the grid above was lowest (4.437 bits/dim against
# uniform's 4.836 and the schedule's 4.713, 2026-12-07): is the ceiling further on?
ddpm_arms="$grid,uniform+likelihood,loss_second_moment+likelihood,adaptive_noise+likelihood"
ddpm_arms+=",beta/a=0.2/b=3.3,beta/a=0.34/b=6.6"
# A learner of the distribution within one run (samplers/beta_search.py): windows of 50 steps (10 rounds in 2,000
# steps) and of 100 (5 rounds, less noise per comparison).
search="beta_search,beta_search/window=100"
ddpm_arms+=",$search"
# The unbiased learner aimed at the variance ceiling (item 3a): grad_variance's rms estimate, the variance-optimal
# marginal proposal learned online from per-example gradient norms, with importance weights and a 5% uniform floor
# (weights at most 20). The ceiling predicts at most 2-3% fewer steps than the schedule on DDPM and flow: a check of
# that prediction with the best unbiased sampler this project has.
rms="grad_variance/estimate=rms/importance_weights=True/uniform_prob=0.05"
ddpm_arms+=",$rms"
# The mirror images toward t = T run on the first pilot seeds only (DDPM 0 and 1, flow 0): on DDPM seeds 0 and 1 they
# ended 0.9 to 3.1 bits/dim above uniform, far from any ceiling, so seed 2 spends its time on the arms still in question.
mirrors="beta/a=2.0/b=0.5,beta/a=3.3/b=0.34"
drop_mirrors() { sed -e "s#,$mirrors##" <<<"$1"; }
ddpm=(python benchmarks/samplers.py --config=configs/default.py --every=500 --out="$out/bench_ddpm56"
  --records=benchmarks/records/ddpm56 --bound_strata=99 --bound_per_stratum=4)
"${ddpm[@]}" --seeds=0,1 --runs=$ddpm_arms
"${ddpm[@]}" --seeds=2 --runs="$(drop_mirrors "$ddpm_arms")"
flow=(python benchmarks/samplers.py --config=configs/flow.py --every=500 --out="$out/bench_flow56"
  --records=benchmarks/records/flow56)
# Flow's pilot keeps the learners the DDPM pilot left standing (2026-12-07, seeds 0-2): beta_search with windows of
# 100 (-0.093 [-0.353, +0.168] bits/dim against uniform, worse in 1 of 3 seeds; windows of 50 worse in 2 of 3); not
# the rms proposal, which was behind the schedule in 3 of 3 DDPM seeds (+0.021 [+0.017, +0.024]) as the variance
# ceiling predicts for flow too (the schedule within 4-5% of the best marginal proposal's M there).
"${flow[@]}" --seeds=0 --runs=$grid,beta_search/window=100
"${flow[@]}" --seeds=1,2 --runs="$(drop_mirrors "$grid,beta_search/window=100")"
