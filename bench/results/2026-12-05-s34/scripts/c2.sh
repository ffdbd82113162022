#!/usr/bin/env bash
# Session 34, call 2: the one-barrier notify (afdf62c) checked where c1 did not (compute-sanitizer on the small
# normal cases, the hostile calls, the internode suite, whose layout shares NormalHeapLayout), then issue 20's
# side by side with DeepEP V1 at 8 and 4 processes (scripts/peer-deepep.sh), heap inputs.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|hostile_calls_test|cuda_internode_test|process_ranks_test)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry34/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry34/c2.tar.xz"; BUDGET=580
STEP_FILTER="rror|FAILED|PASSED|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|MISMATCH|target|host cost|^combine|^cached|^layout|ran "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
step memcheck-r1 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test \
  --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step racecheck-r1 60 compute-sanitizer --tool racecheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test \
  --gtest_brief=1 --gtest_filter='*Small_R1*'
step hostile 60 $T/switchyard_cuda_hostile_calls_test --gtest_brief=1
step internode 120 $T/switchyard_cuda_internode_test --gtest_brief=1
start_mps
step proc-normal-2x4 60 $T/switchyard_cuda_process_ranks_test --ranks 8 --ranks-per-node 4 --engine normal
echo quit | nvidia-cuda-mps-control; sleep 2
step peer 330 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=150 bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
