#!/usr/bin/env bash
# Session 19, call 2 (same build as call 1): the layer as 8 processes under MPS with the heap tensors, W1
# interleaved (GEMM 1 with the SwiGLU epilogue) and halves at 4096 tokens and interleaved at 128, then
# torch 2.11's two fp8 grouped GEMMs alone in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c2; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
[ -x "$B/switchyard-moe-bench" ] || tar -C "$B" -xzf build/gpu-carry/s19c1.tar.gz
BUDGET=${BUDGET:-560}; STEP_TAR=c2
STEP_FILTER="verdict|^layer|^alone|^weights|^gemm peak|torch|TFLOPS|rror"
source scripts/device-step.sh
M=$B/switchyard-moe-bench
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
step moe4096-processes-interleaved 110 "$M" --tokens 4096 --iters 5 --warmup 1 --ranks-as processes --heap on --gate-up interleaved --json "$base/moe4096-processes-interleaved.json"
step moe4096-processes-halves 110 "$M" --tokens 4096 --iters 5 --warmup 1 --ranks-as processes --heap on --gate-up halves --json "$base/moe4096-processes-halves.json"
step moe128-processes-interleaved 50 "$M" --tokens 128 --iters 20 --warmup 3 --ranks-as processes --heap on --gate-up interleaved --json "$base/moe128-processes-interleaved.json"
echo quit | nvidia-cuda-mps-control
step torch 120 python3 tools/peer/torch_grouped_gemm.py --tokens 128 4096 --recipes fp8 --json "$base/torch.json"
echo "total $((SECONDS - step_start)) s"
