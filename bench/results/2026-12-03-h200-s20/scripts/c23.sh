#!/usr/bin/env bash
# Session 20, call 2+3: the engine interface (ac4787a) (1) as processes: gpu-check's processes stage
# (every engine at 2/4/8 processes under MPS, heap tensors, 2 x N "nodes", killed ranks); (2) against
# main before it (6290aaf) in one run: the yardstick (switchyard-bench, every engine, 8 ranks as threads)
# at 128 and at 4096 tokens per rank, the builds interleaved. The before binary is the same sources
# without CUTLASS (no MoE GEMMs): the engines' kernels and the bench are the same code.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c23; B=$PWD/build/g3
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c23-logs.tar.gz" c23 2>/dev/null; true' EXIT
BUDGET=${BUDGET:-520}; STEP_TAR=c23
STEP_FILTER="^== |^  (normal|low_latency|symmetric)|verdict|rror"
source scripts/device-step.sh
tar -C "$B" -xzf build/gpu-carry3/t3.tar.gz
tar -C "$B" -xzf build/gpu-carry3/t2.tar.gz
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step gpu-check-processes 300 env SWITCHYARD_GPU_PREBUILT=build/gpu-carry3/t3.tar.gz SWITCHYARD_GPU_BUILD=$B \
  SWITCHYARD_GPU_STAGES=processes OUT=$base/gpu-check bash scripts/gpu-check.sh
for build in old new old new; do
  bin=$B/tools/bench/switchyard-bench; [ $build = old ] && bin=$bin-old
  step bench128-$build-$SECONDS 60 "$bin" --backend cuda --ranks 8 --tokens 128 --iters 20 \
    --json "$base/bench128-$build-$SECONDS.json"
done
for build in old new; do
  bin=$B/tools/bench/switchyard-bench; [ $build = old ] && bin=$bin-old
  step bench4096-$build 100 "$bin" --backend cuda --ranks 8 --tokens 4096 --symmetric-tokens 4096 \
    --expert-capacity auto --iters 10 --json "$base/bench4096-$build.json"
done
echo "total $((SECONDS - step_start)) s"
