#!/usr/bin/env bash
# Session 38, call 6: why the side by side's layout + dispatch (the call that waits on the host for its counts)
# reads far higher with the release mark (c4, c5: 4 x 128 switchyard 255-470 us, DeepEP 234-312) than session
# 35's c6 with the start event after the hold (144 / 155), while every other call reads the same. The side by
# side's --start-timing after_hold against release_mark, alternating, 2 ms hold, 4 and 8 processes at 128
# tokens, two rounds; then the bench's fresh normal dispatch at 4 processes with a 1 ms and an 8 ms lead (does
# a long hold, through the host's wait for the counts, inflate the time?).
# Carry build/gpu-carry38b (c2's pack: the Python package and nothing else needed), build/gpu-carry38c (the
# bench), .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry38b/c2.tar.xz build/gpu-carry38c/c3.tar.xz"; BUDGET=170
STEP_FILTER="rror|fail|^layout|^  normal +[0-9]"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
for round in 1; do
  for timing in after_hold release_mark; do
    step peer-$timing-$round 120 env DEEPEP_SRC=.deepep-full OUT=$base/peer-$timing-$round PEER_RANKS="4" \
      PEER_TOKENS="128" PEER_TIMEOUT=60 \
      PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000 --start-timing $timing" bash scripts/peer-deepep.sh
  done
done
start_mps
for ahead in 1000 8000; do
  step bench-normal4-ahead$ahead 30 $B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 40 \
    --warmup 5 --ranks-as processes --start timer --start-ahead-us $ahead --ranks 4 --engine normal \
    --normal-heap on --json "$base/bench-normal4-ahead$ahead-$SECONDS.json"
done
echo "total $((SECONDS - step_start)) s"
