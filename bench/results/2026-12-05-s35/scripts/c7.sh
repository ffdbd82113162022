#!/usr/bin/env bash
# Session 35's fourth call (bench/NOTES.md, session 35 plan):
#   1. the normal suite with the gather launched before the counts (late outputs, the default now) and its new
#      cases (after_counts bits, the withdrawn outputs letting the peers finish); memcheck and racecheck on the
#      one-rank in-place cases;
#   2. switchyard-launch-probe (bounded waits now): the ~45 us between the notify's end and the rows kernel's
#      start split into the host seeing the post, the host's own work and the launch reaching the GPU;
#   3. late outputs against after_counts, alternating, 128 tokens x 8 processes, switchyard-bench --start timer,
#      the stamps on in one round;
#   4. --start timer against --start barrier for normal, low_latency and symmetric at 128 tokens x 8 processes;
#   5. the side by side with heap inputs, 8 and 4 processes (timer start).
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|switchyard-bench|switchyard-launch-probe)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry35/c7.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c7; CARRY="build/gpu-carry35/c7.tar.xz"; BUDGET=430
STEP_FILTER="rror|FAILED|PASSED|SUMMARY|fail|^==|^clock|^host-launch|^back-to-back|median|^start|warning|target|^  (normal|low_latency|symmetric) +[0-9]"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda/switchyard_cuda_normal_engine_test
step suite-normal 120 $T --gtest_brief=1
step memcheck-r1 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_brief=1 \
  --gtest_filter='*Small_R1_fp8_heap_inputs*'
step racecheck-r1 60 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck --error-exitcode 9 \
  $T --gtest_brief=1 --gtest_filter='*Small_R1_fp8_heap_inputs*'
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe 40 $P --procs 1,8 --iters 200
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 30 --warmup 3
  --ranks-as processes --normal-heap on)
for round in 1 2; do
  for rows in early after_counts; do
    phases=0; [[ $round == 1 ]] && phases=1
    step rows-$rows-$round 40 env SWITCHYARD_NORMAL_ROWS=$rows SWITCHYARD_NORMAL_PHASES=$phases "${BENCH[@]}" --engine normal \
      --start timer --json "$base/rows-$rows-$round.json"
    [[ $round == 1 ]] && python3 scripts/normal_stamps.py < "$base/rows-$rows-$round.log" \
      | tee "$base/rows-$rows-$round.summary" | grep -E "median|started|done"
  done
done
for start in timer barrier; do
  for engine in low_latency symmetric; do
    step start-$start-$engine 40 "${BENCH[@]}" --engine $engine --start $start --json "$base/start-$start-$engine.json"
  done
done
echo quit | nvidia-cuda-mps-control; sleep 2
step peer-heap 120 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap PEER_RANKS="8 4" PEER_TIMEOUT=110 \
  PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
