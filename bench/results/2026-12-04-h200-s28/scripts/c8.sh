#!/usr/bin/env bash
# Session 28, call 8: the landed build with call 7's dispatch change (x through L1): the normal suite, hostile
# calls, compute-sanitizer on the small cases, and issue 20's side by side with DeepEP V1 at 8 and 4 processes.
cd "$(dirname "$0")/../../../.."
CALL=c8; CARRY="build/gpu-carry28/c8.tar.gz"; BUDGET=230
STEP_FILTER="rror|PASSED|FAILED|SUMMARY|MISMATCH|target|ran "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
step normal-suite 60 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step hostile 30 $T/switchyard_cuda_hostile_calls_test --gtest_brief=1
step memcheck-r1 30 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step racecheck-r1 40 compute-sanitizer --tool racecheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
step peer 150 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=75 bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
