#!/usr/bin/env bash
# Session 47 c7: issue 20's launch spread, split between the launch and the kernel's work. c4-c6 left only the
# engine's own call and kernel between the bench's sequence and the probe's (released-bench, the bench's events,
# marks and a heavy resident consumer, starts ~1.1 us a process apart). An experiment build (not main:
# c7-return-at-start.patch on main at 28b8cf4, packed as exp/switchyard-bench) where every block of the symmetric
# dispatch returns right after its start stamp, and the combines at their entry, when
# SWITCHYARD_EXPERIMENT_RETURN_AT_START is set (its outputs are then wrong and the bench reports the difference:
# expected); the same binary without the variable as the control.
# Predictions: if each dispatch launch itself takes ~2.8 us of the GPU's front end, the early-return calls keep the
# staircase (~20 us at the last of 8); if the running ranks' work delays the later ranks' launches, the spread falls
# to the probe's ~1 us a process (~8-12 us at the last).
cd "$(dirname "$0")/../../../.."
CALL=s47c7; CARRY=${CARRY:-build/gpu-carry47/c7-exp-bench.tar.xz}; BUDGET=${BUDGET:-150}
STEP_FILTER="rror|^  symmetric +[0-9]|first blocks|difference"
source scripts/device-call.sh
BENCH=$B/exp/switchyard-bench
start_mps
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
for round in 1 2; do
  step early-$round 40 env SWITCHYARD_EXPERIMENT_RETURN_AT_START=1 SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${EIGHT[@]}" \
    --json "$base/early-$round.json"
  stamps_summary early-$round > /dev/null
  grep -E "first blocks|last rank's first block" "$base/early-$round.summary" | head -3
  step control-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${EIGHT[@]}" --json "$base/control-$round.json"
  stamps_summary control-$round > /dev/null
  grep -E "first blocks|last rank's first block" "$base/control-$round.summary" | head -3
done
echo "total $((SECONDS - step_start)) s"
