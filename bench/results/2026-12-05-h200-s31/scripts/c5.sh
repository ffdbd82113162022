#!/usr/bin/env bash
# Session 31's fifth call, after c4: the refused call's abort (kAbortedThisCall) now also skips the refused
# call's other barriers (number_barrier: their count differs by rank, and counting them left the ranks'
# barrier numbers apart, so the round trip after the refusal hung in the normal suite), and the internode
# dispatch and combine kernels return when the rank is aborted (combined_x was written in c4). The suites
# that test both, and memcheck on the normal suite's one-rank cases.
# Carry: build/gpu-carry31/c5.tar.xz (SWITCHYARD_PACK_ONLY='(normal_engine|cuda_internode_test|hostile_calls)'
#   bash scripts/gpu-pack.sh build/gpu-local).
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry31/c5.tar.xz"; BUDGET=240
STEP_FILTER="rror|PASSED|FAILED|ERROR SUMMARY|written|after the refusal|refused:"
source scripts/device-call.sh
T=$B/tests/cuda
step suite-normal_engine 60 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step suite-internode 60 $T/switchyard_cuda_internode_test --gtest_brief=1
step suite-hostile_calls 30 $T/switchyard_cuda_hostile_calls_test --gtest_brief=1
step sanitizer-memcheck-normal 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
