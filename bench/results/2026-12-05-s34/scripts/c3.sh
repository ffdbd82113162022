#!/usr/bin/env bash
# Session 34, call 3: NOT RUN (no machine started in the budget's last ~300 s; c4.sh carries it over).
# Planned:
#   1. c2's racecheck timeouts (the ring combine of Small_R1_fp8 waiting 10 s for ring data): the same case
#      with a4521b4's suite (before the one-barrier notify) and with this build's, to tell whether the notify
#      change is the cause;
#   2. the bench's process barrier (tools/bench/process_group.cpp: waiters poll, yielding, for 20 ms before
#      sleeping): this build's bench against afdf62c's (same library, the old barrier), alternating, normal
#      (heap inputs), low_latency and symmetric at 128 tokens x 8 processes; the normal stamps of each, with the
#      host's clock words in this build (c1: ~45 us between a rank's notify end and its rows kernel's start,
#      while the events put the host's turnaround at 1.2 us: is it the host or the launch?);
#   (the side by side with heap inputs, planned here too, did not fit the budget's last 311 s.)
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|switchyard-bench)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry34/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# and c3-old.tar.xz (bench-afdf62c, normal-test-a4521b4).
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry34/c3.tar.xz build/gpu-carry34/c3-old.tar.xz"; BUDGET=170
STEP_FILTER="rror|FAILED|PASSED|RACECHECK SUMMARY|target|host cost|^layout|^cached|^combine|^  (normal|low_latency|symmetric) "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
for build in old new; do
  suite=$T/switchyard_cuda_normal_engine_test; [[ $build == old ]] && suite=$B/normal-test-a4521b4
  step racecheck-$build 45 compute-sanitizer --tool racecheck --error-exitcode 9 "$suite" --gtest_brief=1 \
    --gtest_filter='EdgeCases/*Small_R1_fp8'
done
start_mps
for round in 1; do
  for harness in new old; do
    bench=$B/tools/bench/switchyard-bench; [[ $harness == old ]] && bench=$B/bench-afdf62c
    step barrier-$harness-normal-$round 40 env SWITCHYARD_NORMAL_PHASES=1 "$bench" --backend cuda --engine normal \
      --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on \
      --json "$base/barrier-$harness-normal-$round.json"
    python3 scripts/normal_stamps.py < "$base/barrier-$harness-normal-$round.log" \
      > "$base/barrier-$harness-normal-$round.summary"
    for engine in low_latency symmetric; do
      step barrier-$harness-$engine-$round 40 "$bench" --backend cuda --engine $engine --ranks 8 --tokens 128 \
        --iters 30 --warmup 3 --ranks-as processes --json "$base/barrier-$harness-$engine-$round.json"
    done
  done
done
echo "total $((SECONDS - step_start)) s"
