#!/usr/bin/env bash
# Session 22, call 3: the suites on this session's build (the symmetric dispatch's copier and the shared
# combine reduction changed): symmetric (default pulls, warps and TMA forced), the MoE layer, rank masks,
# hostile calls, and the normal and low_latency suites owed from session 21; compute-sanitizer memcheck on
# the symmetric and MoE one-rank cases; the symmetric engine's bench at 4096 fp8 (call 2's run hit its
# step limit in the header) with the phase stamps.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c3; B=$PWD/build/g3
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry22/c3.tar.gz
BUDGET=${BUDGET:-540}; STEP_TAR=c3
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^  (dispatch|combine)|verdict|rror|timed out"
source scripts/device-step.sh
T=$B/tests/cuda/switchyard_cuda
step symmetric 120 ${T}_symmetric_test --gtest_brief=1
step symmetric-warps 100 env SWITCHYARD_SYMMETRIC_PULL=warps ${T}_symmetric_test --gtest_brief=1
step symmetric-tma 100 env SWITCHYARD_SYMMETRIC_PULL=tma ${T}_symmetric_test --gtest_brief=1
step moe-layer 90 ${T}_moe_layer_test --gtest_brief=1
step rank-mask 60 ${T}_rank_mask_test --gtest_brief=1
step hostile 40 ${T}_hostile_calls_test --gtest_brief=1
step memcheck-symmetric 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1*'
step memcheck-moe 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*Small_R1*'
step sym4096-fp8-new 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 $B/tools/bench/switchyard-bench --backend cuda --engine symmetric \
  --iters 5 --warmup 1 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --symmetric-heap on \
  --symmetric-combine pull --ranks 8 --ranks-as threads --dtype fp8 --json "$base/sym4096-fp8-new.json"
step normal 100 ${T}_normal_engine_test --gtest_brief=1
step low-latency 100 ${T}_low_latency_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
