#!/usr/bin/env bash
# Session 19, call 1: GEMM 1 with SwiGLU in its epilogue (W1 gate/up interleaved). Correctness first
# (the MoE suite, compute-sanitizer on the small cases), then the layer at 4096 and 128 tokens as 8
# threads with W1 interleaved (fused) and halves (separate SwiGLU kernel) in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/s19c1.tar.gz
BUDGET=${BUDGET:-560}; STEP_TAR=c1
STEP_FILTER="verdict|^layer|^alone|^weights|^gemm peak|^  (dispatch|gemm|swiglu|combine)|PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-step.sh
T=$B/switchyard_cuda_moe_layer_test; M=$B/switchyard-moe-bench
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step moe-suite 170 "$T"
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='Clamps/MoeSwigluEpilogue.*:Recipes/MoeLayerCuda.*/Small_R1_fp8:Recipes/MoeLayerCuda.*/fp8_r2_k1'
step moe4096-threads-interleaved 100 "$M" --tokens 4096 --iters 5 --warmup 1 --gate-up interleaved --json "$base/moe4096-threads-interleaved.json"
step moe4096-threads-halves 100 "$M" --tokens 4096 --iters 5 --warmup 1 --gate-up halves --json "$base/moe4096-threads-halves.json"
step moe128-threads-interleaved 45 "$M" --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/moe128-threads-interleaved.json"
step moe128-threads-halves 45 "$M" --tokens 128 --iters 20 --warmup 3 --gate-up halves --json "$base/moe128-threads-halves.json"
echo "total $((SECONDS - step_start)) s"
