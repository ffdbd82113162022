#!/usr/bin/env bash
# Session 18, call 2: after the heap's 2 MiB allocation (05f068e), every expert-major figure as threads
# and as processes in the same call: symmetric 4096 fp8/bf16 and 128, low_latency 128, the MoE layer at
# 4096 and 128 tokens.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c2; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
nvidia-smi --query-gpu=name,memory.total,clocks.sm,temperature.gpu --format=csv,noheader
BUDGET=${BUDGET:-560}; STEP_TAR=c2
source scripts/device-step.sh
SB=$B/switchyard-bench; M=$B/switchyard-moe-bench
S4=(--backend cuda --engine symmetric --iters 5 --warmup 1 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --symmetric-heap on --symmetric-combine pull --ranks 8)
S128=(--backend cuda --engine symmetric --iters 50 --warmup 5 --ranks 8 --symmetric-heap on)
LL=(--backend cuda --engine low_latency --ranks 8 --iters 50 --warmup 5)
run_all() {  # mode
  local m=$1
  step sym4096-fp8-$m 60 "$SB" "${S4[@]}" --dtype fp8 --ranks-as $m
  step sym4096-bf16-$m 60 "$SB" "${S4[@]}" --dtype bf16 --ranks-as $m
  step sym128-$m 40 "$SB" "${S128[@]}" --ranks-as $m
  step ll128-$m 40 "$SB" "${LL[@]}" --ranks-as $m
  step moe4096-$m 120 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as $m --heap on --json "$base/moe4096-$m.json"
  step moe128-$m 60 "$M" --tokens 128 --iters 10 --warmup 2 --ranks-as $m --heap on --json "$base/moe128-$m.json"
}
run_all threads
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
run_all processes
step moe4096-processes-heapoff 120 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --json "$base/moe4096-processes-heapoff.json"
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - step_start)) s"
