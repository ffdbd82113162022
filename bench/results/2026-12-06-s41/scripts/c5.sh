#!/usr/bin/env bash
# Session 41, call 5: the session's final build (GPU-scope signals in every engine): the symmetric dispatch at
# 128 x 8 processes (heap + pull, with its stamps), both scopes alternating, on whatever card comes (c1 and c4
# measured the other engines; the device time left held no more); the GPU pytest (deep_ep runs the normal engine, changed after c2's pytest), hostile
# calls, the symmetric and MoE suites and memcheck. New since c1: the push's closing fence (every thread, after
# its rows) and the pull combine's record at the peers' scope too (was __threadfence_system, a fence.sc.sys).
# Prediction: released (last) - stores drained (last) 8-10 -> 5-7 us; symmetric dispatch (gpu) ~115.5 -> 112-114
# at 128 x 8 processes on an H100 (sys, the old code in full, beside it); combine -0 to -1.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|hostile_calls_test|cuda_symmetric_test|moe_layer_test)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry41/c5.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deps/wheels.
cd "$(dirname "$0")/../../../.."
CALL=s41c5; CARRY="build/gpu-carry41/c5.tar.xz"; BUDGET=240
STEP_FILTER="rror|FAILED|PASSED|passed|failed|^  (symmetric|low_latency|normal) +[0-9]|^copy"
source scripts/device-call.sh
use_carried_python
BENCH=$B/tools/bench/switchyard-bench
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  grep -E '^(barrier passed|stores drained|walked|released|signal|tables \(|first row)' "$base/$1.summary"; }
start_mps
for round in 1 2; do
  for scope in sys gpu; do
    step sym128-$scope-$round 40 env SWITCHYARD_SIGNAL_SCOPE=$scope SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH \
      --backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer \
      --symmetric-heap on --symmetric-combine pull --ranks-as processes --json "$base/sym128-$scope-$round.json"
    summary sym128-$scope-$round
  done
done
step pytest-gpu 120 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_cuda_ranks.py \
  tests/python/test_layout_entry.py tests/python/test_moe.py -p no:cacheprovider
step hostile 40 $B/tests/cuda/switchyard_cuda_hostile_calls_test --gtest_brief=1
echo quit | nvidia-cuda-mps-control; sleep 2
step symmetric 120 $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_brief=1
step sanitizer-symmetric 40 compute-sanitizer --tool memcheck --error-exitcode 1 \
  $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_filter='*Small_R1*'
step moe 100 $B/tests/cuda/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
