#!/usr/bin/env bash
# Session 37, call 3 (warm after calls 1-2; build/dev from call 1): the yardstick's start order, A/B in one run.
# Prediction (NOTES, session 37): with the start event before the timer hold and the hold's span taken off, the
# 8-process figures at 128 tokens drop 8-12 us a phase and the symmetric dispatch's ranks' first blocks start
# within ~5 us of each other instead of ~39; at 4 processes the drop is 3-5 us. Alternating after_hold (the old
# order) and before_hold, two rounds each, 8 processes: symmetric with heap tensors (x in place, pull combine)
# with its stamps, normal in place, low_latency; then 4 processes, normal in place.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY=""; BUDGET=540
STEP_FILTER="rror|fail|^==|^  (normal|low_latency|symmetric) +[0-9]|^start "
source scripts/device-call.sh
B=$PWD/build/dev
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 40 --warmup 5 --ranks-as processes
  --start timer)
SYM=(--engine symmetric --symmetric-heap on --symmetric-combine pull)
for round in 1 2; do
  for order in after_hold before_hold; do
    export SWITCHYARD_BENCH_START_EVENT=$order
    step sym-$order-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks 8 "${SYM[@]}" \
      --json "$base/sym-$order-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/sym-$order-$round.log" > "$base/sym-$order-$round.summary" 2>&1
    grep -E "^(start|barrier|stores)" "$base/sym-$order-$round.summary" | head -6
    step normal-$order-$round 40 "${BENCH[@]}" --ranks 8 --engine normal --normal-heap on \
      --json "$base/normal-$order-$round.json"
    step ll-$order-$round 40 "${BENCH[@]}" --ranks 8 --engine low_latency --json "$base/ll-$order-$round.json"
    step normal4-$order-$round 40 "${BENCH[@]}" --ranks 4 --engine normal --normal-heap on \
      --json "$base/normal4-$order-$round.json"
  done
done
unset SWITCHYARD_BENCH_START_EVENT
echo quit | nvidia-cuda-mps-control; sleep 2
echo "total $((SECONDS - step_start)) s"
