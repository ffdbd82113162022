#!/usr/bin/env bash
# Session 38, call 7 (not run: the session's device time ran out; the next session runs it first, ~60 s).
# First the new GPU test of MappedHostWords and the timer's end mark (tests/cuda/mapped_host_words_cuda_test.cu).
# Then the counts wait's yield (c6's lead). The bench's fresh normal dispatch at 4 and 8 processes,
# 128 tokens, in place, with an 8 ms lead: SWITCHYARD_COUNTS_SPIN_US=1000 (the default: yield after 1 ms) against
# 20000, alternating, two rounds; a 1 ms lead as the control. Prediction (NOTES, c6): if the yield is the cause,
# the 8 ms lead with 20000 reads within 2 us of the 1 ms lead's dispatch, and 1000 reads ~9.5 us above it.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|mapped_host_words)' SWITCHYARD_PACK_OUT=build/gpu-carry38d/c7.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c7; CARRY="build/gpu-carry38d/c7.tar.xz"; BUDGET=120
STEP_FILTER="rror|PASSED|FAILED|^  normal +[0-9]"
source scripts/device-call.sh
step mapped-host-words 30 $B/tests/cuda/switchyard_cuda_mapped_host_words_test
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 40 --warmup 5 --ranks-as processes
  --start timer --engine normal --normal-heap on)
for round in 1 2; do
  for ranks in 4 8; do
    step r$ranks-ahead1000-$round 20 "${BENCH[@]}" --ranks $ranks --start-ahead-us 1000 \
      --json "$base/r$ranks-ahead1000-$round.json"
    for spin in 1000 20000; do
      step r$ranks-ahead8000-spin$spin-$round 20 env SWITCHYARD_COUNTS_SPIN_US=$spin "${BENCH[@]}" --ranks $ranks \
        --start-ahead-us 8000 --json "$base/r$ranks-ahead8000-spin$spin-$round.json"
    done
  done
done
echo "total $((SECONDS - step_start)) s"
