#!/usr/bin/env bash
# The GPU preset: on a GPU machine with this repository and Python 3.11, install what is missing, then in about
# 10 minutes measure what this project's 2-core CPU cannot:
#   1. the throughput table of the CIFAR-10 config (35.7M-parameter UNet, batch 128) in float32 and in bfloat16:
#      ms per step, the learned sampler's amortised ratio to uniform, compile times, measured peak memory and MFU
#      (benchmarks/throughput.py);
#   2. a mid-scale sampler comparison: the embedded MNIST (28x28) with a 6.5M-parameter UNet (configs/mnist_unet.py),
#      uniform against the learned sampler, 2 seeds each, 2,000 steps, with --mode=eval (the bound on 200 test images,
#      FID/KID of 1,000 samples) and paired differences (benchmarks/samplers.py).
# Everything lands in $OUT (default benchmarks/results/device): env.txt, throughput_float32.md,
# throughput_bfloat16.md, samplers.md, samplers.png, and device.log with each part's wall-clock.
#
#     bash benchmarks/device.sh
#
# Nothing is downloaded at run time but the packages (pip); the MNIST classifier for FID trains on first use.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/benchmarks/results/device}
PY=${PYTHON:-python}
mkdir -p "$OUT"
LOG="$OUT/device.log"
: > "$LOG"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

if ! $PY -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
  say "installing requirements and jax's CUDA plugin"
  JAX_VERSION=$(grep -E '^jax==' requirements.txt | cut -d= -f3)
  $PY -m pip install -q -r requirements.txt "jax[cuda12]==$JAX_VERSION" >> "$LOG" 2>&1 || say "pip install failed"
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  date -u
} > "$OUT/env.txt"
cat "$OUT/env.txt" | tee -a "$LOG"

start=$(date +%s)
for dtype in float32 bfloat16; do
  say "throughput, CIFAR-10 config, $dtype"
  t0=$(date +%s)
  timeout 210 $PY benchmarks/throughput.py --configs=cifar10 --reps=10 --set "model.dtype=$dtype" \
    > "$OUT/throughput_$dtype.md" 2>> "$LOG" || say "throughput $dtype failed or timed out (see $LOG)"
  tail -n 4 "$OUT/throughput_$dtype.md" | tee -a "$LOG"
  say "throughput $dtype: $(( $(date +%s) - t0 )) s"
done

say "samplers, embedded MNIST 28x28, uniform vs adaptive, seeds 0 and 1"
t0=$(date +%s)
timeout 420 $PY benchmarks/samplers.py --config=configs/mnist_unet.py --runs=uniform,adaptive --seeds=0,1 \
  --every=500 --out="$OUT/mnist_runs" --set train.num_steps=2000 --set eval.nll_images=200 \
  --set eval.fid.num_samples=1000 >> "$LOG" 2>&1 || say "samplers failed or timed out (see $LOG)"
cp "$OUT/mnist_runs/samplers.md" "$OUT/samplers.md" 2>/dev/null && cp "$OUT/mnist_runs/samplers.png" "$OUT/samplers.png"
say "samplers: $(( $(date +%s) - t0 )) s"
say "total (after install): $(( $(date +%s) - start )) s; results in $OUT"
