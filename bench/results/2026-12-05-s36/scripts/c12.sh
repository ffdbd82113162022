#!/usr/bin/env bash
# Session 36, call 12 (on c11's warm machine, an H200: issue 20's target hardware): the decode engines at 128 x 8
# processes, timer start: low_latency, and symmetric with heap tensors (x in place, pull combine), with the
# symmetric dispatch's stamps; then the normal fresh dispatch (in place).
cd "$(dirname "$0")/../../../.."
CALL=c12; CARRY="build/gpu-carry36/c9.tar.xz"; BUDGET=150
STEP_FILTER="rror|fail|^==|^  (normal|low_latency|symmetric) +[0-9]|^barrier|^stores|^start "
source scripts/device-call.sh
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 40 --warmup 5
  --ranks-as processes --start timer)
step ll 40 "${BENCH[@]}" --engine low_latency --json "$base/ll.json"
step sym 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --engine symmetric --symmetric-heap on \
  --symmetric-combine pull --json "$base/sym.json"
python3 scripts/symmetric_stamps.py < "$base/sym.log" > "$base/sym.summary"; grep -E "^(start|barrier|stores)" "$base/sym.summary"
step normal 40 "${BENCH[@]}" --engine normal --normal-heap on --json "$base/normal.json"
echo "total $((SECONDS - step_start)) s"
