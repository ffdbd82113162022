#!/usr/bin/env bash
# Session 48 c3 (prepared, NOT RUN: the session's device time went to refused starts). The change is a patch, not
# on main: `git apply bench/results/2026-12-07-s48/scripts/c3-kept-tables.patch`, build, pack as below, and carry
# main's bench (built before the patch) as old/switchyard-bench in old-bench.tar.xz.
# The symmetric dispatch's tables from memory the engine keeps (cuda/symmetric/tables_arena.hpp):
# no stream-ordered allocation between the caller's work and the kernel once a slot is reused (c1's trace: the
# call's only stream operation besides the launch). Against main's bench (old/switchyard-bench),
# alternating, with the stamps; then the suites the change reaches on the new build, memcheck on the one-rank
# cases, and the process ranks.
# Pack: SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry48-c3/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   plus old-bench.tar.xz (main's bench as old/switchyard-bench).
# Predictions (H100): if the allocation spaces the launches, the last rank's first block ~8 us after the first
# (from ~19.6) and the 8-process dispatch 113 -> ~100 us (127 -> ~143 GB/s per rank); threads likewise
# (~102 -> ~90); one rank unchanged within 1 us. If not, no change, and the allocation is ruled out.
# Suites: symmetric (with the new KeptTables test) all pass, rank masks, hostile, MoE, process ranks; memcheck 0.
cd "$(dirname "$0")/../../../.."
CALL=s48c3; CARRY=${CARRY:-"build/gpu-carry48-c3/all.tar.xz build/gpu-carry48-c3/old-bench.tar.xz"}; BUDGET=${BUDGET:-480}
STEP_FILTER="^  dispatch  |^  combine  |rror|first blocks|FAIL|PASSED|tests ran|SUMMARY"
source scripts/device-call.sh
C=$B/tests/cuda
SYM=$C/switchyard_cuda_symmetric_test
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
export SWITCHYARD_SYMMETRIC_STAMPS=1
step threads-old 40 $B/old/switchyard-bench "${EIGHT[@]}"
stamps_summary threads-old | tail -1
step threads-new 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}"
stamps_summary threads-new | tail -1
start_mps
for round in 1 2; do
  step eight-old-$round 40 $B/old/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-old-$round.json"
  stamps_summary eight-old-$round | tail -1
  step eight-new-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-new-$round.json"
  stamps_summary eight-new-$round | tail -1
done
unset SWITCHYARD_SYMMETRIC_STAMPS
echo quit | nvidia-cuda-mps-control; sleep 2
step kept-tables 60 $SYM --gtest_filter='*KeptTables*:*BackToBack*' --gtest_brief=1
step symmetric 150 $SYM --gtest_brief=1
start_mps
step processes-symmetric-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
echo quit | nvidia-cuda-mps-control; sleep 2
step hostile 45 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step memcheck-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $SYM \
  --gtest_filter='*Small_R1*' --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step one-rank 30 $B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 \
  --warmup 5 --symmetric-heap on --symmetric-combine pull
echo "total $((SECONDS - step_start)) s"
