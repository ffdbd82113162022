#!/usr/bin/env bash
# Session 49 c2: programmatic dependent launch for every kernel of the normal, low_latency and symmetric engines
# (cuda/backend/dependent_launch.hpp; SWITCHYARD_DEPENDENT_LAUNCH=on, the default, or off), on top of session 48's
# kept tables. One experiment line: SWITCHYARD_EXPERIMENT_NO_KEPT_TABLES=1 allocates the symmetric dispatch's
# tables every call (the question: does the tables' cuMemAllocAsync between the caller's kernel and the dispatch
# void the dependent launch?).
# Pack: SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry49b/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions (written before the run; H100 or H200, 128 tokens, --start timer, 8 processes under MPS):
# - symmetric dispatch: on ~7 us under off (c1: 113.5 -> 106.5 on an H100 with PDL on the dispatch alone);
#   pull combine: on ~5-7 us under off (the same launch latency), so <= 80 us on either card;
#   on + no kept tables: if the allocation voids the dependent launch, level with off; else level with on.
# - low_latency: each of its two kernels a phase ~5 us faster (the receive kernel follows the send in the stream:
#   its launch is hidden behind the send's tail too): ~8-10 us a phase.
# - normal: 128 tokens, several kernels a call: ~5 us a kernel after the first.
# - threads: symmetric dispatch ~9 us (c1's PDL=2 run gave 98.5 against 107.4).
# Suites: every one passes with on, and symmetric also with off; memcheck 0 errors.
cd "$(dirname "$0")/../../../.."
CALL=s49c2; CARRY=${CARRY:-"build/gpu-carry49b/all.tar.xz"}; BUDGET=${BUDGET:-330}
STEP_FILTER="^  dispatch  |^  combine  |^  layout|rror|first blocks|FAIL|PASSED|tests ran|SUMMARY|passed|failed"
source scripts/device-call.sh
C=$B/tests/cuda
SB=$B/tools/bench/switchyard-bench
SYM=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
LL=(--backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
NORMAL=(--backend cuda --engine normal --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
start_mps
sym8_round() {
  SWITCHYARD_DEPENDENT_LAUNCH=off step sym8-off-$1 40 $SB "${SYM[@]}" --ranks-as processes --json "$base/sym8-off-$1.json"
  step sym8-on-$1 40 $SB "${SYM[@]}" --ranks-as processes --json "$base/sym8-on-$1.json"
  SWITCHYARD_EXPERIMENT_NO_KEPT_TABLES=1 step sym8-on-nokept-$1 40 $SB "${SYM[@]}" --ranks-as processes --json "$base/sym8-on-nokept-$1.json"
}
sym8_round 1
SWITCHYARD_DEPENDENT_LAUNCH=off step ll8-off 40 $SB "${LL[@]}" --ranks-as processes --json "$base/ll8-off.json"
step ll8-on 40 $SB "${LL[@]}" --ranks-as processes --json "$base/ll8-on.json"
SWITCHYARD_DEPENDENT_LAUNCH=off step normal8-off 60 $SB "${NORMAL[@]}" --ranks-as processes --json "$base/normal8-off.json"
step normal8-on 60 $SB "${NORMAL[@]}" --ranks-as processes --json "$base/normal8-on.json"
for engine in normal low_latency symmetric; do
  step processes-$engine-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine $engine
done
step processes-symmetric-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
sym8_round 2
echo quit | nvidia-cuda-mps-control; sleep 2
SWITCHYARD_DEPENDENT_LAUNCH=off step threads-off 40 $SB "${SYM[@]}"
step threads-on 40 $SB "${SYM[@]}"
step late-inputs 60 $C/switchyard_cuda_symmetric_test --gtest_filter='*InputsThePrevious*:*DependentLaunch*:*KeptTables*' --gtest_brief=1
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step low-latency 120 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step normal 120 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*:*InputsThePrevious*' --gtest_brief=1
step hostile 45 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
SWITCHYARD_DEPENDENT_LAUNCH=off step symmetric-off 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
