#!/usr/bin/env bash
# Session 36, call 1 (main's build, da38e2d): measure before any change.
#  - the launch probe and the normal phases' stamps on session 35's rewritten plumbing (never run);
#  - issue 20, deliverable 4: low_latency at 128 x 8 as threads and as processes in one run, timer start,
#    alternating, two rounds;
#  - deliverable 5: symmetric at 128 x 8 with heap tensors (zero-copy dispatch, pull combine: the 2-pass
#    paths), threads and processes, timer start, with the dispatch's phase stamps;
#  - the side by side at 4 processes x 128 tokens, three runs (layout + dispatch was 0.93-1.11x DeepEP).
# This checkout was new and its 2-core build had not finished: the call builds what it runs on the device
# (scripts/device-build.sh), from the working tree (main + the stand-in of a failed dispatch, engine.cpp).
# Carry .deps and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY=""; BUDGET=590
STEP_FILTER="rror|FAILED|fail|^==|^clock|^host-launch|^back-to-back|target|^  (normal|low_latency|symmetric) +[0-9]|^  (dispatch|combine) |median|^start"
source scripts/device-call.sh
step build 300 bash scripts/device-build.sh switchyard-bench switchyard-launch-probe \
  switchyard_cuda_normal_engine_test _C _torch_ops
B=$PWD/build/dev
export PYTHONPATH=$B/pkg
step suite-normal 90 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1
start_mps
step probe 40 $B/tools/launch_probe/switchyard-launch-probe --procs 1,8 --iters 200
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
step normal-phases 40 env SWITCHYARD_NORMAL_PHASES=1 "${BENCH[@]}" --ranks-as processes --normal-heap on \
  --engine normal --json "$base/normal-phases.json"
python3 scripts/normal_stamps.py < "$base/normal-phases.log" | tee "$base/normal-phases.summary" | head -20
for round in 1 2; do
  for mode in threads processes; do
    step ll-$mode-$round 40 "${BENCH[@]}" --ranks-as $mode --engine low_latency --json "$base/ll-$mode-$round.json"
  done
done
SYM=(--engine symmetric --symmetric-heap on --symmetric-dispatch zero_copy --symmetric-combine pull)
for mode in threads processes; do
  step sym-$mode 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as $mode "${SYM[@]}" \
    --json "$base/sym-$mode.json"
  python3 scripts/symmetric_stamps.py < "$base/sym-$mode.log" | tee "$base/sym-$mode.summary" | tail -12
done
step sym-processes-nostamps 40 "${BENCH[@]}" --ranks-as processes "${SYM[@]}" --json "$base/sym-processes-2.json"
echo quit | nvidia-cuda-mps-control; sleep 2
step peer-4x128 150 env DEEPEP_SRC=.deepep-full OUT=$base/peer-4x128 PEER_RANKS="4 4 4" PEER_TOKENS=128 \
  PEER_TIMEOUT=45 PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
