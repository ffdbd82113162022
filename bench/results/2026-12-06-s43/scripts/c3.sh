#!/usr/bin/env bash
# Session 43, call 3: (1) c1 found session 42's minimal kernel clean both ways, while racecheck still reports
# RowTables::build in 28 of the symmetric suite's 31 one-rank cases (all but Small_R1_bf16_pull and the two
# one_expert_full non-zero-copy EdgeCases). The reported write is a store inside the build's warp scan (SASS
# 0x1ef40, after shuffles with a divergent-warp path), the read the second scan's load (0x20340), a BAR.SYNC 0
# between them. barrier_sequence_racecheck.cu (beside this script) runs racecheck on eight variants: six barrier
# sequences around a plain write / read, then the build's own warp scans alone and after the kernel's sequence.
# Prediction: if the tool mis-reads one of these, the variant that copies it is reported and the rest are clean;
# if none is reported, the tool is not explained by them and the tables need a closer look (a real ordering fault
# stays possible). (2) gpu-check's racecheck of the normal suite as gpu-check runs it:
# SWITCHYARD_NORMAL_TEST_TIMEOUT=120 (c2's run without it timed out two cases at the suite's 10 s bound under the
# sanitizer's slowdown, with 0 hazards). Prediction: 0 hazards, every case passes.
# Build: nvcc -O3 -arch=sm_90a -lineinfo -Isrc -o build/racecheck-probe43/barrier_sequence_racecheck \
#   bench/results/2026-12-06-s43/scripts/barrier_sequence_racecheck.cu
# Carry build/racecheck-probe43 and c2's pack (build/gpu-carry43/c2.tar.xz).
cd "$(dirname "$0")/../../../.."
CALL=s43c3; CARRY="build/gpu-carry43/c2.tar.xz"; BUDGET=240
STEP_FILTER="rror|FAILED|PASSED|hazard|RACECHECK SUMMARY|variant"
source scripts/device-call.sh
for variant in 0 1 2 3 4 5 6 7; do
  step variant-$variant 30 compute-sanitizer --tool racecheck --racecheck-report all \
    build/racecheck-probe43/barrier_sequence_racecheck $variant
done
C=$B/tests/cuda
step racecheck-normal 200 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck \
  --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
