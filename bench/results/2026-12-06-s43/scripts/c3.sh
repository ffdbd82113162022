#!/usr/bin/env bash
# Session 43, call 3: (1) c1 found session 42's minimal kernel clean both ways, and the symmetric reports come
# only from the cases whose routing runs in every block (zero-copy, fp8, push), where the routing warps' named
# barrier 1 comes before and after a grid sync (__syncthreads, __syncthreads_and); the plain bf16 pull (routing in
# block 0 only, no grid sync) is not reported. barrier_sequence_racecheck.cu (beside this script) runs racecheck
# on six barrier sequences. Prediction: variants 1 and 5 reported (a named barrier after a bar.red), 0, 2, 3 not;
# if none is reported the tool is not the explanation and the tables need a closer look. (2) gpu-check's
# racecheck of the normal suite as gpu-check runs it: SWITCHYARD_NORMAL_TEST_TIMEOUT=120 (c2's run without it
# timed out two cases at the suite's 10 s bound under the sanitizer's slowdown, with 0 hazards).
# Build: nvcc -O3 -arch=sm_90a -lineinfo -o build/racecheck-probe43/barrier_sequence_racecheck \
#   bench/results/2026-12-06-s43/scripts/barrier_sequence_racecheck.cu
# Carry build/racecheck-probe43 and c2's pack (build/gpu-carry43/c2.tar.xz).
cd "$(dirname "$0")/../../../.."
CALL=s43c3; CARRY="build/gpu-carry43/c2.tar.xz"; BUDGET=420
STEP_FILTER="rror|FAILED|PASSED|hazard|RACECHECK SUMMARY|variant"
source scripts/device-call.sh
for variant in 0 1 2 3 4 5; do
  step variant-$variant 30 compute-sanitizer --tool racecheck --racecheck-report all \
    build/racecheck-probe43/barrier_sequence_racecheck $variant
done
C=$B/tests/cuda
step racecheck-normal 330 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck \
  --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
