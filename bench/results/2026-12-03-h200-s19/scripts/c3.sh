#!/usr/bin/env bash
# Session 19, call 3: the landed build (the SwiGLU epilogue opt-in, SWITCHYARD_MOE_SWIGLU_EPILOGUE). The MoE
# suite and compute-sanitizer on the small cases, then the layer at 4096 tokens as 8 threads with W1
# interleaved on the default path (the separate kernels reading h through the interleave) beside halves.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c3; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/s19c3.tar.gz
BUDGET=${BUDGET:-400}; STEP_TAR=c3
STEP_FILTER="verdict|^layer|^alone|^weights|^gemm peak|PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-step.sh
T=$B/switchyard_cuda_moe_layer_test; M=$B/switchyard-moe-bench
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step moe-suite 170 "$T"
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='Clamps/MoeSwigluEpilogue.*:MoeSwigluEpilogueOptIn.*:Recipes/MoeLayerCuda.*/Small_R1_fp8:Recipes/MoeLayerCuda.*/fp8_r2_k1'
step moe4096-threads-interleaved 100 "$M" --tokens 4096 --iters 5 --warmup 1 --gate-up interleaved --json "$base/moe4096-threads-interleaved.json"
step moe4096-threads-halves 100 "$M" --tokens 4096 --iters 5 --warmup 1 --gate-up halves --json "$base/moe4096-threads-halves.json"
echo "total $((SECONDS - step_start)) s"
