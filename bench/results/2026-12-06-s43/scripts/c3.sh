#!/usr/bin/env bash
# Session 43, call 3 (the device time left: ~360 s): (1) c1 found session 42's minimal kernel clean both ways,
# while racecheck still reports RowTables::build in 28 of the symmetric suite's 31 one-rank cases (all but
# Small_R1_bf16_pull and the two one_expert_full non-zero-copy EdgeCases). The reported write is a store inside
# the build's first warp scan (SASS 0x1ef40, among the shuffles' divergent-warp paths), the read the second scan's
# load (0x20340), a BAR.SYNC 0 between them. barrier_sequence_racecheck.cu (beside this script) runs racecheck on
# eight variants: six barrier sequences around a plain write / read, then the build's own two warp scans alone and
# after the kernel's sequence. (2) The build in one pass (cuda/symmetric/tables.cuh): a warp per rank, each lane
# summing its expert's counts of the ranks before it, so no warp reads another's begin; the symmetric suite, and
# its one-rank cases under racecheck and memcheck.
# Predictions: (1) if the tool mis-reads one of these patterns, the variant that copies it is reported and the rest
# are clean; if none is, the tool is not explained by them. (2) the suite passes bitwise (199/199), racecheck
# reports 0 hazards (no cross-warp pair is left in the tables), memcheck 0 errors.
# Build the probe: nvcc -O3 -arch=sm_90a -lineinfo -Isrc -o build/racecheck-probe43/barrier_sequence_racecheck \
#   bench/results/2026-12-06-s43/scripts/barrier_sequence_racecheck.cu
# Pack: SWITCHYARD_PACK_ONLY='(cuda_symmetric_test)' SWITCHYARD_PACK_OUT=build/gpu-carry43/c3.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s43c3; CARRY="build/gpu-carry43/c3.tar.xz"; BUDGET=150
STEP_FILTER="rror|FAILED|PASSED|hazard|RACECHECK SUMMARY|ERROR SUMMARY|variant"
source scripts/device-call.sh
C=$B/tests/cuda
step racecheck-symmetric 60 compute-sanitizer --tool racecheck $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
for variant in 0 1 2 3 4 5 6 7; do
  step variant-$variant 15 compute-sanitizer --tool racecheck --racecheck-report all \
    build/racecheck-probe43/barrier_sequence_racecheck $variant
done
step symmetric 120 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step memcheck-symmetric 30 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
echo "total $((SECONDS - step_start)) s"
