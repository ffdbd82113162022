#!/usr/bin/env bash
# Session 21, call 6: the pair epilogue's exchange by st.async (each store counting its bytes on the
# receiver's mbarrier; no fence in the sender). Correctness first (the epilogue test, the MoE suite's
# one-rank cases, compute-sanitizer memcheck / racecheck / synccheck on the epilogue test and on the
# MoE suite's Small_R1 cases, as gpu-check runs them); then GEMM 1 at one rank, m128 against the epilogue.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c6; B=$PWD/build/g6
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c6-logs.tar.gz" c6 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry21/c6.tar.gz
BUDGET=${BUDGET:-190}; STEP_TAR=c6
STEP_FILTER="^layer|^alone|^  (gemm 1|swiglu)|PASSED|FAILED|SUMMARY|verdict|rror"
source scripts/device-step.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test; M=$B/tools/moe_bench/switchyard-moe-bench
step epilogue-test 30 "$T" --gtest_filter='*SwigluEpilogue*'
step racecheck-epilogue 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_filter='*SwigluEpilogue*'
step racecheck-small 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_filter='*Small_R1*'
step memcheck-epilogue 30 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_filter='*SwigluEpilogue*:*Small_R1*'
step synccheck-epilogue 30 compute-sanitizer --tool synccheck --error-exitcode 9 "$T" --gtest_filter='*SwigluEpilogue*:*Small_R1*'
R1=(--ranks 1 --tokens 32768 --iters 3 --warmup 1)
step one-rank-m128 40 "$M" "${R1[@]}"
step one-rank-epilogue 40 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" "${R1[@]}" --gate-up interleaved
step moe-suite 80 "$T"
echo "total $((SECONDS - step_start)) s"
