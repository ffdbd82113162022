#!/usr/bin/env bash
# Session 47 c5: issue 20's launch spread once more (c4: the kernel's code size is not it; the probe's consumers
# start ~0.7 us a process apart with 256 KB of code, run or not). One more difference between the bench and the
# probe: the bench evicts the caches before every timed phase (--cache-flush on, the default: the GPU's first rank
# writes 2 x L2 before the ranks meet), so every rank's launch after the hold finds L2 cold; the probe never
# flushes. The decode call's stamps with the flush off and on, alternating, same build (main at f5bb77d).
# Pack: c4's (build/gpu-carry47/c4.tar.xz).
# Predictions: if a cold L2 slows each launch where the launches are processed one after another, the first blocks
# with --cache-flush off ~0.6-1 us a process apart (the last of 8 at ~5-8 us instead of ~20) and the dispatch
# 10-15 us faster; if not, the same staircase both ways.
cd "$(dirname "$0")/../../../.."
CALL=s47c5; CARRY=${CARRY:-build/gpu-carry47/c4.tar.xz}; BUDGET=${BUDGET:-150}
STEP_FILTER="rror|^  symmetric +[0-9]|first blocks"
source scripts/device-call.sh
BENCH=$B/tools/bench/switchyard-bench
start_mps
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
for round in 1 2; do
  for flush in off on; do
    step stamps-flush-$flush-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${EIGHT[@]}" --cache-flush $flush \
      --json "$base/stamps-flush-$flush-$round.json"
    stamps_summary stamps-flush-$flush-$round > /dev/null
    grep -E "first blocks|^step|last rank" "$base/stamps-flush-$flush-$round.summary" | head -3
  done
done
echo "total $((SECONDS - step_start)) s"
