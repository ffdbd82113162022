#!/usr/bin/env bash
# Session 36, call 9: the fresh normal dispatch at 128 tokens, 4 and 8 processes, in place, timer start:
# SWITCHYARD_NORMAL_PHASES=stamps (new: the clock stamps without the events, which spread the ranks) against
# no stamps, to split the 4-rank layout + dispatch (~135 us in the side by side, DeepEP 91-177) without the
# events' cost. Then the normal suite (the stamps mode's refusal test, and the stand-in tests again).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|normal_engine_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry36/c9.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c9; CARRY="build/gpu-carry36/c9.tar.xz"; BUDGET=300
STEP_FILTER="rror|FAILED|PASSED|fail|^==|^  normal +[0-9]|median|entered|^published|^exchanged|^notify|^rows"
source scripts/device-call.sh
start_mps
for ranks in 4 8; do
  BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks $ranks --tokens 128 --iters 40 --warmup 5
    --ranks-as processes --start timer --normal-heap on --engine normal)
  for round in 1 2; do
    step n$ranks-stamps-$round 40 env SWITCHYARD_NORMAL_PHASES=stamps "${BENCH[@]}" --json "$base/n$ranks-stamps-$round.json"
    [[ $round == 1 ]] && python3 scripts/normal_stamps.py < "$base/n$ranks-stamps-$round.log" > "$base/n$ranks-stamps.summary"
    step n$ranks-plain-$round 40 "${BENCH[@]}" --json "$base/n$ranks-plain-$round.json"
  done
  cat "$base/n$ranks-stamps.summary"
done
echo quit | nvidia-cuda-mps-control; sleep 1
if [[ -x $B/tests/cuda/switchyard_cuda_normal_engine_test ]]; then
  step suite-normal 120 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1
fi
echo "total $((SECONDS - step_start)) s"
