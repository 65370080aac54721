#!/usr/bin/env bash
# The paired sampler tables of docs/benchmarks/rivals.md (flow matching, DDPM and the latent DiT on the embedded
# data), one run at a time on one core, resumable: re-running skips finished runs and resumes an interrupted one.
# About 8 hours of an idle core, 10 to 15 while other jobs share this project's 2-core CPU machine
# (docs/benchmarks/rivals.md#the-tables-cost).
#   taskset -c 1 bash benchmarks/tables.sh [OUT]      (OUT: workdirs by default)
# Each finished run's record (its eval JSON, metrics and wall-clock, no checkpoint) is kept in benchmarks/records/,
# which is committed: on another machine a clean clone takes the finished runs from there and goes on with the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-workdirs}
seeds10=0,1,2,3,4,5,6,7,8,9
flow() { python benchmarks/samplers.py --config=configs/flow.py --every=250 --out="$out/bench_flow22" \
  --records=benchmarks/records/flow22 "$@"; }
ddpm() { python benchmarks/samplers.py --config=configs/default.py --every=500 --out="$out/bench_ddpm22" \
  --records=benchmarks/records/ddpm22 "$@"; }
latent() { python benchmarks/samplers.py --config=configs/mnist_latent.py:dit --every=500 --out="$out/bench_latent22" \
  --records=benchmarks/records/latent22 "$@"; }
flow_runs=uniform,logitnormal,infonoise,adaptive_noise,adaptive,adaptive/importance_weights=True
ddpm_runs=uniform,adaptive,infonoise,adaptive_noise
latent_runs=uniform,adaptive,infonoise
# Pilots first (a finished run is skipped, so the full tables below reuse them): 3 seeds of each table, which size
# it (samplers.py --size_from), and the 3-seed pilots of the learned sampler's knobs, of SD3's shift and of
# InfoNoise's automatic gate.
flow --seeds=0,1,2 --runs=$flow_runs
flow --seeds=0,1,2 --runs=uniform,adaptive,adaptive/entropy_coef=0.001,adaptive/entropy_coef=0.0,adaptive/policy_lr=0.1,logitnormal,logitnormal/shift=3.0
for f in samplers.md samplers.png policy.png; do cp "$out/bench_flow22/$f" "$out/bench_flow22/knobs_$f"; done
sed -i 's#(policy.png)#(knobs_policy.png)#' "$out/bench_flow22/knobs_samplers.md"
# InfoNoise with the automatic gate onset (a public port's reading of the paper's appendix) beside the fixed c = 0.15
flow --seeds=0,1,2 --runs=uniform,infonoise,infonoise/gate=auto
for f in samplers.md samplers.png; do cp "$out/bench_flow22/$f" "$out/bench_flow22/gate_$f"; done
ddpm --seeds=0,1,2 --runs=$ddpm_runs
# the latent DiT reads the embedded MNIST latents: encoded once
[ -f latents/mnist/meta.json ] || python -m data.encode_latents --dataset=mnist --autoencoder=embedded:mnist \
  --output=latents/mnist
latent --seeds=0,1 --runs=$latent_runs
# the full tables: flow matching and DDPM (the quickstart's 2,000 steps) on the digits, 10 seeds; the latent DiT
# (configs/mnist_latent.py:dit, class-conditional, embedded MNIST latents), 4 seeds
flow --seeds=$seeds10 --runs=$flow_runs
ddpm --seeds=$seeds10 --runs=$ddpm_runs
latent --seeds=0,1,2,3 --runs=$latent_runs
