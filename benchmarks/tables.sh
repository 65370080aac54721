#!/usr/bin/env bash
# The paired sampler tables of docs/benchmarks.md (flow matching, DDPM and the latent DiT on the embedded data), one
# run at a time on one core, resumable: re-running skips finished runs and resumes an interrupted one. About 8 hours
# of one core on this project's 2-core CPU machine (each table's pilot cost is in docs/benchmarks.md).
#   taskset -c 1 bash benchmarks/tables.sh [OUT]      (OUT: workdirs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-workdirs}
seeds10=0,1,2,3,4,5,6,7,8,9
# flow matching on the digits (configs/flow.py: 2,000 steps)
python benchmarks/samplers.py --config=configs/flow.py --every=250 --out="$out/bench_flow22" --seeds=$seeds10 \
  --runs=uniform,logitnormal,infonoise,adaptive_noise,adaptive,adaptive/importance_weights=True
# DDPM on the digits at the quickstart's 2,000 steps (configs/default.py)
python benchmarks/samplers.py --config=configs/default.py --every=500 --out="$out/bench_ddpm22" --seeds=$seeds10 \
  --runs=uniform,adaptive,infonoise,adaptive_noise
# the latent DiT on the embedded MNIST latents (configs/mnist_latent.py:dit)
[ -f latents/mnist/meta.json ] || python -m data.encode_latents --dataset=mnist --autoencoder=embedded:mnist \
  --output=latents/mnist
python benchmarks/samplers.py --config=configs/mnist_latent.py:dit --every=500 --out="$out/bench_latent22" \
  --seeds=0,1,2,3 --runs=uniform,adaptive,infonoise
# pilots of the learned sampler's knobs and of the shift (3 seeds, flow matching)
python benchmarks/samplers.py --config=configs/flow.py --every=250 --out="$out/bench_flow22" --seeds=0,1,2 \
  --runs=uniform,adaptive/entropy_coef=0.0,adaptive/policy_lr=0.1,logitnormal/shift=3.0
