#!/usr/bin/env bash
# Session 38, call 3. c1 showed session 37's timer order (start event before the hold, its span taken off)
# reading 12-17 us *higher* than the old order while the symmetric stamps put the ranks' work 17 us earlier:
# the hold's launch gap after the start event is in the time. This build times a held phase on the GPU's
# clock from the hold's release to an end mark (release_mark, the default). Here:
#   1. the start-hold GPU test (the timer kernels preloaded; c1's failure was a lazy load waiting 20 ms);
#   2. the three timings A/B at 128 tokens x 8 processes (symmetric heap + pull with stamps, normal in place)
#      and 4 processes (normal), alternating, two rounds (NOTES session 38 has the prediction);
#   3. the symmetric suite (c1 gave it 60 s; it needs ~150) and its one-rank memcheck;
#   4. low_latency at 128 x 8 processes (issue 20's deliverable 5 figures under the new timing).
# Pack: SWITCHYARD_PACK_ONLY='(start_hold|switchyard-bench|symmetric_test|low_latency_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry38c/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry38c/c3.tar.xz"; BUDGET=420
STEP_FILTER="rror|FAILED|fail|PASSED|tests ran|^==|^  (normal|low_latency|symmetric) +[0-9]|^start |passed|SUMMARY"
source scripts/device-call.sh
C=$B/tests/cuda
step start-hold 30 $B/tests/bench/switchyard_bench_start_hold_cuda_test
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 40 --warmup 5 --ranks-as processes
  --start timer)
SYM=(--engine symmetric --symmetric-heap on --symmetric-combine pull)
for round in 1 2; do
  for timing in after_hold before_hold release_mark; do
    export SWITCHYARD_BENCH_START_EVENT=$timing
    step sym-$timing-$round 30 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks 8 "${SYM[@]}" \
      --json "$base/sym-$timing-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/sym-$timing-$round.log" > "$base/sym-$timing-$round.summary" 2>&1
    grep -E "^(start|barrier|released)" "$base/sym-$timing-$round.summary" | head -4
    step normal-$timing-$round 30 "${BENCH[@]}" --ranks 8 --engine normal --normal-heap on \
      --json "$base/normal-$timing-$round.json"
    step normal4-$timing-$round 30 "${BENCH[@]}" --ranks 4 --engine normal --normal-heap on \
      --json "$base/normal4-$timing-$round.json"
  done
  unset SWITCHYARD_BENCH_START_EVENT
done
step ll-release_mark 40 "${BENCH[@]}" --ranks 8 --engine low_latency --json "$base/ll-release_mark.json"
step sym-plain-release_mark 30 "${BENCH[@]}" --ranks 8 "${SYM[@]}" --json "$base/sym-plain-release_mark.json"
echo quit | nvidia-cuda-mps-control; sleep 2
step symmetric 200 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step sanitizer-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
echo "total $((SECONDS - step_start)) s"
