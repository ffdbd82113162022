#!/usr/bin/env bash
# Session 20, call 1: the engine interface (ac4787a: every engine a unit in one EngineTable per backend,
# CUDA engines starting their calls through CallServices) on the GPU: every GPU suite as threads
# (gpu-check's tests stage, the symmetric suite also with each pull forced), then compute-sanitizer
# memcheck on the one-rank cases of the suites whose calls changed route.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
BUDGET=${BUDGET:-440}; STEP_TAR=c1
STEP_FILTER="^== |PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-step.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step gpu-check-tests 420 env SWITCHYARD_GPU_PREBUILT=build/gpu-carry/t1.tar.gz SWITCHYARD_GPU_BUILD=$B \
  SWITCHYARD_GPU_STAGES=tests OUT=$base/gpu-check bash scripts/gpu-check.sh
T=$B/tests/cuda
step memcheck-normal 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_normal_engine_test" \
  --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step memcheck-low_latency 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_low_latency_test" \
  --gtest_filter='*Small_R1*'
step memcheck-symmetric 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_symmetric_test" \
  --gtest_filter='*Small_R1*'
step memcheck-moe 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_moe_layer_test" \
  --gtest_filter='Recipes/MoeLayerCuda.*/Small_R1_fp8'
echo "total $((SECONDS - step_start)) s"
