#!/usr/bin/env bash
# Session 28, call 2: the normal combine's receiver as a coordinator warp and 23 reducing warps (24-warp
# blocks). Correctness first (the normal suite as threads, with a new 32-rank case; hostile calls; processes
# under MPS, one node and 2 x 4; compute-sanitizer memcheck and racecheck on the small cases), then issue 20's
# side by side with DeepEP V1 at 8 and 4 processes (scripts/peer-deepep.sh).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry28/c2.tar.gz"; BUDGET=570
STEP_FILTER="rror|FAILED|PASSED|passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|MISMATCH|target|^combine|^cached|^layout|ran "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
step normal-suite 150 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step hostile 60 $T/switchyard_cuda_hostile_calls_test --gtest_brief=1
step memcheck-r1 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step racecheck-r1 90 compute-sanitizer --tool racecheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
step memcheck-r2 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R2*'
start_mps
for ranks in 8 4 2; do step proc-normal-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine normal; done
step proc-normal-2x4 60 $T/switchyard_cuda_process_ranks_test --ranks 8 --ranks-per-node 4 --engine normal
echo quit | nvidia-cuda-mps-control; sleep 2
step peer 300 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=150 bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
