#!/usr/bin/env bash
# Session 44, call 3 (typed into two device calls on the warm H100 after c2, kept here as they ran): the normal
# suite's one-rank cases under racecheck with the suite's device waits bounded at 500 s (then, in the second call,
# the tuned case under racecheck and Small_R1_fp8 under synccheck, bounded at 50 s). Unpacks c1's binaries
# (build/gpu-carry44/c1.tar.xz) into /tmp.
mkdir -p "$OUT/r" && tar -C /tmp -xf build/gpu-carry44/c1.tar.xz
T=/tmp/tests/cuda/switchyard_cuda_normal_engine_test
SWITCHYARD_NORMAL_TEST_TIMEOUT=500 timeout 570 compute-sanitizer --tool racecheck --error-exitcode 1 "$T" \
  --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*' > "$OUT/r/racecheck-normal.log" 2>&1
echo "racecheck rc=$?"
# The second call:
SWITCHYARD_NORMAL_TEST_TIMEOUT=50 timeout 75 compute-sanitizer --tool synccheck --error-exitcode 1 "$T" \
  --gtest_filter='*Small_R1_fp8' > "$OUT/r/synccheck-fp8.log" 2>&1
echo "synccheck rc=$?"
SWITCHYARD_NORMAL_TEST_TIMEOUT=50 timeout 75 compute-sanitizer --tool racecheck --error-exitcode 1 "$T" \
  --gtest_filter='*Small_R1_tuned*:*Small_R1_bf16*' > "$OUT/r/racecheck-tuned.log" 2>&1
echo "racecheck rc=$?"
