#!/usr/bin/env bash
# Session 41, call 4: the normal engine's signals at GPU scope too (device_barrier.cuh's barrier of all ranks,
# the rings' tails and heads, wait_at_least), against SWITCHYARD_SIGNAL_SCOPE=sys, alternating, 8 processes,
# heap inputs in place, 128 and 4096 tokens. Prediction: at 128 the notify's barrier and the gather's closing
# barrier each shorter (like the symmetric signal, ~2.5 us each): dispatch -2 to -5 us, combine -1 to -3; at 4096
# (in place: no rings on the path, two barriers a call) level within the runs' spread. Then the normal suite both
# ways, internode (wait_at_least), process ranks and a killed rank.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|cuda_internode_test|process_ranks_test|killed_rank_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry41/c4.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s41c4; CARRY="build/gpu-carry41/c4.tar.xz"; BUDGET=500
STEP_FILTER="rror|FAILED|PASSED|passed|failed|killed|^  normal +[0-9]"
source scripts/device-call.sh
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
N=(--backend cuda --engine normal --ranks 8 --start timer --normal-heap on --ranks-as processes)
start_mps
for round in 1 2; do
  for scope in sys gpu; do
    step n128-$scope-$round 40 env SWITCHYARD_SIGNAL_SCOPE=$scope $BENCH "${N[@]}" --tokens 128 --iters 40 --warmup 5 \
      --json "$base/n128-$scope-$round.json"
  done
done
for scope in sys gpu; do
  step n4096-$scope 60 env SWITCHYARD_SIGNAL_SCOPE=$scope $BENCH "${N[@]}" --tokens 4096 --iters 8 --warmup 2 \
    --json "$base/n4096-$scope.json"
done
step processes-normal-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine normal
step processes-normal-heap-np4 60 $C/switchyard_cuda_process_ranks_test --ranks 4 --engine normal --heap-tensors on
step killed-normal-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine normal
echo quit | nvidia-cuda-mps-control; sleep 2
step normal 150 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step normal-sys 150 env SWITCHYARD_SIGNAL_SCOPE=sys $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step internode 120 $C/switchyard_cuda_internode_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
