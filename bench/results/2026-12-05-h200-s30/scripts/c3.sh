#!/usr/bin/env bash
# Session 30's third call (c2 was not run: too little session time left for DeepEP's build). After c1's one
# failure (ring kernels launched after a refused opening wrote outputs; the fix: they return when the rank is
# aborted): the normal suite again, compute-sanitizer on its one-rank cases, then issue 20's measurement of the
# normal engine in place against its rings, switchyard-bench as 8 processes under MPS.
# Carry: SWITCHYARD_PACK_ONLY='(normal_engine|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry30/c3.tar.xz
#   SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry30/c3.tar.xz"; BUDGET=540
STEP_FILTER="rror|ERROR SUMMARY|Hazard|PASSED|FAILED|check:|^  (dispatch|combine) |^normal"
source scripts/device-call.sh
T=$B/tests/cuda
step suite-normal_engine 120 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
for tool in memcheck; do
  step sanitizer-$tool-normal 90 compute-sanitizer --tool $tool --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
done
start_mps
for tokens in 4096 128; do
  for heap in off on; do
    iters=5; [[ $tokens == 128 ]] && iters=30
    step bench-r8-t$tokens-heap-$heap 70 $B/tools/bench/switchyard-bench --backend cuda --engine normal --ranks 8 --tokens $tokens --iters $iters --warmup 2 --ranks-as processes --normal-heap $heap --json $base/bench-r8-t$tokens-heap-$heap.json
  done
done
echo "total $((SECONDS - step_start)) s"
