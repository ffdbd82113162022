#!/usr/bin/env bash
# Session 19, call 4 (the landed build): at 128 tokens per rank the layer is bound by reading the weights,
# not by the tensor cores; does GEMM 1's SwiGLU epilogue (64 x 256 pingpong tiles there, which spill like the
# 128 x 256 ones) pay there, where it saves the SwiGLU kernel and h's round trip? 8 threads, fp8, W1 halves,
# interleaved on the default path, and interleaved with SWITCHYARD_MOE_SWIGLU_EPILOGUE=on, in one call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c4; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c4-logs.tar.gz" c4 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/s19c3.tar.gz
BUDGET=${BUDGET:-330}; STEP_TAR=c4
STEP_FILTER="verdict|^layer|^alone|^weights|^  (dispatch|gemm|swiglu|combine)|rror"
source scripts/device-step.sh
M=$B/switchyard-moe-bench
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step moe128-halves 100 "$M" --tokens 128 --iters 20 --warmup 3 --gate-up halves --json "$base/moe128-halves.json"
step moe128-epilogue 100 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/moe128-epilogue.json"
step moe128-interleaved 100 "$M" --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/moe128-interleaved.json"
echo "total $((SECONDS - step_start)) s"
