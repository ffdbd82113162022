#!/usr/bin/env bash
# Session 49 c3 (NOT RUN: refused, too little device time left; the last ~80 s): memcheck on the symmetric suite's one-rank cases with the
# dependent launch on (the default), without c2's late-writer test, whose previous kernel triggers its dependents
# at its start: under compute-sanitizer the dispatch then read its inputs before they were written (c2), which
# it never did without the tool (c2's suites). Prediction: 0 errors, every test passed.
cd "$(dirname "$0")/../../../.."
CALL=s49c3; CARRY=${CARRY:-"build/gpu-carry49b/all.tar.xz"}; BUDGET=${BUDGET:-40}
STEP_FILTER="FAIL|PASSED|SUMMARY"
source scripts/device-call.sh
step memcheck 35 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/cuda/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*' --gtest_brief=1
