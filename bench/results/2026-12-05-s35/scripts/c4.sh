#!/usr/bin/env bash
# Session 35's first GPU call (session 34's c4 without its peer step, which is c5's) (its budget ran out before c3 could start; c3.sh is this call's first
# half). Owed:
#   1. racecheck on the normal suite's one-rank cases with the device waits at 120 s
#      (SWITCHYARD_NORMAL_TEST_TIMEOUT): c2's ring-combine timeouts at 10 s, slowness or a hang?
#   2. the bench's process barrier (0e47c9c: waiters poll, yielding, for 20 ms) and the notify's routing copy
#      (the handle's is_token_in_rank written by the notify's scan instead of a D2D copy before it) against
#      afdf62c's bench (the old barrier, the copy), alternating; the two are told apart by the stamps (the entry
#      spread is the barrier's; the phases' "layout" step is the copy's), normal (heap inputs), low_latency and symmetric at 128 tokens x 8 processes; the
#      normal stamps of each, with the host's clock words (4ad1d1b): the ~45 us from a rank's notify end to its
#      rows kernel's start, host or launch?
#   3. staged inputs (945cf18) against views and rings at 4096 tokens x 8 processes (switchyard-bench);
#   4. the side by side with DeepEP V1 with switchyard's heap inputs, 8 and 4 processes, 128 and 4096 tokens: issue
#      20's verdict after the one-barrier notify (c2 of session 34 ran the ring paths by mistake); a 2 ms sleep
#      before each call, since c2's 1 ms did not always cover the host's enqueue.
# Pack (from a build of main):
#   SWITCHYARD_PACK_ONLY='(normal_engine_test|switchyard-bench)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry35/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it, build/gpu-carry34/c3-old.tar.xz (bench-afdf62c) and .deepep-full. Its steps can run past one call's
# 600 s (the racecheck's bound is 150 s): if so, run the peer step as a call of its own.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry35/c1.tar.xz build/gpu-carry34/c3-old.tar.xz"; BUDGET=580
STEP_FILTER="rror|FAILED|PASSED|RACECHECK SUMMARY|target|host cost|^layout|^cached|^combine|^  (normal|low_latency|symmetric) |median"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
step suite-normal 150 $T/switchyard_cuda_normal_engine_test --gtest_brief=1  # with the staged cases
step memcheck-staged 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test \
  --gtest_brief=1 --gtest_filter='*Small_R1_fp8_heap_inputs*'
step racecheck-r1 150 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck --error-exitcode 9 \
  $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*'
start_mps
for round in 1 2; do
  for harness in new old; do
    bench=$B/tools/bench/switchyard-bench; [[ $harness == old ]] && bench=$B/bench-afdf62c
    step barrier-$harness-normal-$round 40 env SWITCHYARD_NORMAL_PHASES=1 "$bench" --backend cuda --engine normal \
      --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on \
      --json "$base/barrier-$harness-normal-$round.json"
    python3 scripts/normal_stamps.py < "$base/barrier-$harness-normal-$round.log" \
      | tee "$base/barrier-$harness-normal-$round.summary" | grep median
    for engine in low_latency symmetric; do
      step barrier-$harness-$engine-$round 40 "$bench" --backend cuda --engine $engine --ranks 8 --tokens 128 \
        --iters 30 --warmup 3 --ranks-as processes --json "$base/barrier-$harness-$engine-$round.json"
    done
  done
done
# Staged inputs (945cf18): the Buffer with heap inputs, the calls passing ordinary tensors, against views
# (on) and rings (off), 4096 tokens x 8 processes. Prediction (bench/NOTES.md, session 34): dispatch on +
# ~300 us (one local pass over 58 MB a rank, 8 ranks sharing HBM), well under off; combine on + ~1.5-2 ms.
for heap in on staged off; do
  step heap-$heap-r8-t4096 90 $B/tools/bench/switchyard-bench --backend cuda --engine normal --ranks 8 \
    --tokens 4096 --iters 20 --warmup 3 --ranks-as processes --normal-heap $heap --json "$base/heap-$heap-r8-t4096.json"
done
echo quit | nvidia-cuda-mps-control; sleep 2
echo "total $((SECONDS - step_start)) s"
