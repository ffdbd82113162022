#!/usr/bin/env bash
# Session 48 c2 (NOT RUN: no machine started; c3 tests the same question with the real change): c1's trace shows one driver call between the bench's hold and the symmetric dispatch's launch
# besides the launch: the call's one stream-ordered allocation (its tables; the combine's window has none), and
# CUDA_DEVICE_MAX_CONNECTIONS moved nothing (threads: 19.9 us at 32 connections, 19.3 at 8). Experiment build
# (scripts/c2-keep-tables.patch, not main): SWITCHYARD_EXPERIMENT_KEEP_TABLES=1 keeps one tables allocation for
# every call, so no cuMemAllocAsync sits in the window.
# Predictions: if that allocation spaces the launches (the probe's allocations did not, but its pool never had a
# Buffer's settings beside a timed engine call), the last rank's first block ~8 us after the first instead of ~19.6
# and the dispatch 113 -> ~100 us (8 processes, H100); else no change.
# Pack: c2-main.tar.xz, main's bench alone (gpu-pack.sh, SWITCHYARD_PACK_ONLY=switchyard-bench); c2-exp.tar.xz holds exp/switchyard-bench (the patch applied, stripped).
cd "$(dirname "$0")/../../../.."
CALL=s48c2; CARRY=${CARRY:-"build/gpu-carry48-c2/c2-main.tar.xz build/gpu-carry48-c2/c2-exp.tar.xz"}; BUDGET=${BUDGET:-200}
STEP_FILTER="^  dispatch  |^  combine  |rror|first blocks|FAIL"
source scripts/device-call.sh
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
export SWITCHYARD_SYMMETRIC_STAMPS=1
step threads-main 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}"
stamps_summary threads-main | tail -1
step threads-keep 40 env SWITCHYARD_EXPERIMENT_KEEP_TABLES=1 $B/exp/switchyard-bench "${EIGHT[@]}"
stamps_summary threads-keep | tail -1
start_mps
for round in 1 2; do
  step eight-main-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes
  stamps_summary eight-main-$round | tail -1
  step eight-keep-$round 40 env SWITCHYARD_EXPERIMENT_KEEP_TABLES=1 $B/exp/switchyard-bench "${EIGHT[@]}" --ranks-as processes
  stamps_summary eight-keep-$round | tail -1
done
step eight-exp-plain 40 $B/exp/switchyard-bench "${EIGHT[@]}" --ranks-as processes
stamps_summary eight-exp-plain | tail -1
echo "total $((SECONDS - step_start)) s"
