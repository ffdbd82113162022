#!/usr/bin/env bash
# Session 28, call 5: A/B of the normal engine as processes (MPS, switchyard-bench), rotating: v0 = main; v3 =
# call 4's (coordinator receiver, 24 warps, the token's ring rows looked up once); v5 = v3 with the block's
# shared-memory handoffs as atomics (racecheck); v6 = v5 + the dispatch kernel at 24 warps (was 16).
# Then v5's normal suite, memcheck and racecheck on its small cases.
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry28/c5.tar.gz"; BUDGET=400
STEP_FILTER="rror|^  (dispatch|combine)|verdict: fail|PASSED|FAILED|SUMMARY"
source scripts/device-call.sh
T=$B/tests/cuda
step normal-suite 120 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step racecheck-r1 120 compute-sanitizer --tool racecheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
step memcheck-r1 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step synccheck-r1 60 compute-sanitizer --tool synccheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
start_mps
run() { local name=$1 v=$2 ranks=$3 tokens=$4; shift 4
  step $name 60 $B/switchyard-bench-$v --backend cuda --engine normal --ranks $ranks --tokens $tokens --ranks-as processes --json $base/$name.json "$@"; }
for round in 1 2; do
  for v in v0 v3 v5 v6; do run $v-r8-$round $v 8 4096 --iters 5 --warmup 2; done
done
for v in v3 v5 v6; do run $v-r4 $v 4 4096 --iters 5 --warmup 2; done
for v in v5 v6; do run $v-r8-t128 $v 8 128 --iters 30; done
echo "total $((SECONDS - step_start)) s"
