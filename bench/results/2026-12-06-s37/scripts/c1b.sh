#!/usr/bin/env bash
# Session 37, call 1b: what the last ~4 minutes of device budget hold (failed starts took the rest): the
# start-hold test, the normal suite (the stand_in_dispatch refactor), and the start order A/B at 128 x 8
# processes, symmetric heap + pull and normal in place, one round. Binaries: c1's carry.
cd "$(dirname "$0")/../../../.."
CALL=c1b; CARRY="build/gpu-carry37/c1.tar.xz"; BUDGET=110
STEP_FILTER="rror|FAILED|fail|PASSED|tests ran|^==|^  (normal|low_latency|symmetric) +[0-9]|^start "
source scripts/device-call.sh
C=$B/tests/cuda
step start-hold 20 $B/tests/bench/switchyard_bench_start_hold_cuda_test
step normal 40 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --tokens 128 --iters 30 --warmup 3 --ranks-as processes
  --start timer --ranks 8)
for order in after_hold before_hold; do
  step sym-$order 25 env SWITCHYARD_BENCH_START_EVENT=$order SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" \
    --engine symmetric --symmetric-heap on --symmetric-combine pull --json "$base/sym-$order.json"
  python3 scripts/symmetric_stamps.py < "$base/sym-$order.log" > "$base/sym-$order.summary" 2>&1
  grep -E "^(start|barrier|stores)" "$base/sym-$order.summary" | head -4
done
for order in after_hold before_hold; do
  step normal-$order 20 env SWITCHYARD_BENCH_START_EVENT=$order "${BENCH[@]}" --engine normal --normal-heap on \
    --json "$base/normal-$order.json"
done
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - step_start)) s"
