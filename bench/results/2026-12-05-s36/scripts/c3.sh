#!/usr/bin/env bash
# Session 36, call 3: the normal suite with the stand-in of a failed dispatch on both paths (in place and
# rings; CudaNormalFailedDispatch.*), then where the timer start's kernel-start spread comes from: the same
# stamps with the host-barrier start (session 34 saw the notify entries within 5 us of each other that way).
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY=""; BUDGET=420
STEP_FILTER="rror|FAILED|PASSED|fail|^==|^  (normal|symmetric) +[0-9]|median|entered|^start "
source scripts/device-call.sh
step build 300 bash scripts/device-build.sh switchyard-bench switchyard_cuda_normal_engine_test
B=$PWD/build/dev
step suite-normal 120 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 40 --warmup 5 --ranks-as processes)
SYM=(--engine symmetric --symmetric-heap on --symmetric-combine pull)
for start in barrier timer; do
  step sym-$start 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --start $start "${SYM[@]}" --json "$base/sym-$start.json"
  python3 scripts/symmetric_stamps.py < "$base/sym-$start.log" | tee "$base/sym-$start.summary" | tail -8
  step normal-$start 40 env SWITCHYARD_NORMAL_PHASES=1 "${BENCH[@]}" --start $start --normal-heap on --engine normal \
    --json "$base/normal-$start.json"
  python3 scripts/normal_stamps.py < "$base/normal-$start.log" | tee "$base/normal-$start.summary" | head -4
done
echo "total $((SECONDS - step_start)) s"
