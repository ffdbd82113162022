#!/usr/bin/env bash
# Session 38, call 1: session 37's c1 (never run: no GPU), with the binaries rebuilt after MappedHostWords.
#  1. Binaries built here (build/gpu-local) and carried: the suites that call the normal dispatch (session
#     36's stand-ins, this session's stand_in_dispatch), the process ranks, the bench. Pack:
#     SWITCHYARD_PACK_ONLY='(normal_engine|internode|process_ranks|low_latency|symmetric|rank_mask|hostile|killed|start_hold|switchyard-bench)' \
#       SWITCHYARD_PACK_OUT=build/gpu-carry38/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#  2. The owed suites: start-hold (new), normal (polled, copied), internode, process ranks (every engine, 2/4/8,
#     heap tensors, 2 nodes), low_latency, symmetric, rank_mask, hostile_calls, killed ranks, sanitizer on
#     the normal one-rank cases.
#  3. The yardstick's start order A/B (NOTES session 37 prediction): 128 tokens x 8 processes, after_hold (the
#     old order) against before_hold, alternating, two rounds: symmetric heap + pull with stamps, normal in
#     place; 4 processes normal in place.
# Later steps are skipped (said so) when the call's budget runs out.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry38/c1.tar.xz"; BUDGET=450
STEP_FILTER="rror|FAILED|fail|PASSED|tests ran|^==|^  (normal|low_latency|symmetric) +[0-9]|^start |^device-build|passed"
source scripts/device-call.sh
C=$B/tests/cuda
step start-hold 30 $B/tests/bench/switchyard_bench_start_hold_cuda_test
step normal 60 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 40 --warmup 5 --ranks-as processes
  --start timer)
SYM=(--engine symmetric --symmetric-heap on --symmetric-combine pull)
ab_round() {  # round
  local round=$1 order
  for order in after_hold before_hold; do
    export SWITCHYARD_BENCH_START_EVENT=$order
    step sym-$order-$round 30 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks 8 "${SYM[@]}" \
      --json "$base/sym-$order-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/sym-$order-$round.log" > "$base/sym-$order-$round.summary" 2>&1
    grep -E "^(start|barrier|stores)" "$base/sym-$order-$round.summary" | head -4
    step normal-$order-$round 30 "${BENCH[@]}" --ranks 8 --engine normal --normal-heap on \
      --json "$base/normal-$order-$round.json"
    step normal4-$order-$round 30 "${BENCH[@]}" --ranks 4 --engine normal --normal-heap on \
      --json "$base/normal4-$order-$round.json"
  done
  unset SWITCHYARD_BENCH_START_EVENT
}
ab_round 1
step normal-copy 60 env SWITCHYARD_NORMAL_COUNTS=copy $C/switchyard_cuda_normal_engine_test --gtest_brief=1
for engine in normal low_latency symmetric; do
  step proc-$engine-np8 40 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine $engine
done
step proc-normal-heap-np8 40 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine normal --heap-tensors on
step proc-normal-np8-n2x4 40 $C/switchyard_cuda_process_ranks_test --ranks 8 --ranks-per-node 4 --engine normal
step killed-normal-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine normal
echo quit | nvidia-cuda-mps-control; sleep 2
step internode 90 $C/switchyard_cuda_internode_test --gtest_brief=1
start_mps
ab_round 2
echo quit | nvidia-cuda-mps-control; sleep 2
step low_latency 60 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step symmetric 60 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step rank_mask 60 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step sanitizer-normal 90 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool memcheck --error-exitcode 1 \
  $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
