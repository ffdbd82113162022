#!/usr/bin/env bash
# Session 49 c1: session 48's c3 (the symmetric dispatch's tables kept from call to call), plus an experiment on
# the same build: the dispatch launched with programmatic dependent launch (PDL).
# Build: main + bench/results/2026-12-07-s48/scripts/c3-kept-tables.patch + this session's experiment lines
# (SWITCHYARD_SYMMETRIC_PDL: 1 = the dispatch launched with cudaLaunchAttributeProgrammaticStreamSerialization and a
# griddepcontrol.wait before its first global access; 2 = the same, and the bench's hold kernel triggers its
# dependents at its start, so the dispatch grid is set up while the hold spins). old/switchyard-bench: main's.
# Pack: SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry49/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   plus build/gpu-carry49/old-bench.tar.xz (main's bench as old/switchyard-bench).
# Predictions (written before the run):
# - kept tables: if the allocation spaces the launches, the last rank's first block ~8 us after the first (from
#   ~19.6 on an H100, ~12 on an H200) and the 8-process dispatch 113 -> ~100 us on an H100 (99 -> ~90 H200);
#   otherwise level within 2 us, and the patch is dropped.
# - PDL=1 (hold does not trigger): the grid's set-up done before the hold ends; if the per-process ~2.5 us is the
#   front end's launch processing, the staircase shrinks (last rank <= ~8 us); if it is the MPS server's turn
#   per client at the release, no change.
# - PDL=2 (hold triggers at its start): every rank's blocks resident and waiting before the release, so the
#   staircase should collapse to ~1-2 us and the dispatch drop by ~10-15 us; an upper bound on what PDL can give
#   when the caller's previous kernel triggers.
# Suites after: symmetric (with the KeptTables test) with and without PDL=1, process ranks, hostile, memcheck,
# rank masks, MoE.
cd "$(dirname "$0")/../../../.."
CALL=s49c1; CARRY=${CARRY:-"build/gpu-carry49/all.tar.xz build/gpu-carry49/old-bench.tar.xz"}; BUDGET=${BUDGET:-500}
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
SWITCHYARD_SYMMETRIC_PDL=2 step threads-pdl2 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}"
stamps_summary threads-pdl2 | tail -1
start_mps
for round in 1 2; do
  step eight-old-$round 40 $B/old/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-old-$round.json"
  stamps_summary eight-old-$round | tail -1
  step eight-new-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-new-$round.json"
  stamps_summary eight-new-$round | tail -1
  SWITCHYARD_SYMMETRIC_PDL=1 step eight-pdl1-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-pdl1-$round.json"
  stamps_summary eight-pdl1-$round | tail -1
  SWITCHYARD_SYMMETRIC_PDL=2 step eight-pdl2-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes --json "$base/eight-pdl2-$round.json"
  stamps_summary eight-pdl2-$round | tail -1
done
unset SWITCHYARD_SYMMETRIC_STAMPS
step processes-symmetric-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
SWITCHYARD_SYMMETRIC_PDL=1 step processes-symmetric-heap-np8-pdl1 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
echo quit | nvidia-cuda-mps-control; sleep 2
step kept-tables 60 $SYM --gtest_filter='*KeptTables*:*BackToBack*' --gtest_brief=1
step symmetric 150 $SYM --gtest_brief=1
SWITCHYARD_SYMMETRIC_PDL=1 step symmetric-pdl1 150 $SYM --gtest_brief=1
step hostile 45 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step memcheck-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $SYM \
  --gtest_filter='*Small_R1*' --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step one-rank 30 $B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 \
  --warmup 5 --symmetric-heap on --symmetric-combine pull
echo "total $((SECONDS - step_start)) s"
