#!/usr/bin/env bash
# Session 36, call 2 (on c1's warm machine and build/dev): the fixed bad-id test (the peers' outputs are the
# library's: the bad id changes what they receive), and symmetric at 128 x 8 processes with heap tensors
# (dispatch auto: x read in place from the heap input; c1 named zero_copy, which processes refuse).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY=""; BUDGET=200
STEP_FILTER="rror|FAILED|PASSED|fail|^==|^  (symmetric) +[0-9]|^  (dispatch|combine) |median|source"
source scripts/device-call.sh
step build 150 bash scripts/device-build.sh switchyard-bench switchyard_cuda_normal_engine_test
B=$PWD/build/dev
step errors 60 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='CudaNormalEngineErrors.*'
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
SYM=(--engine symmetric --symmetric-heap on --symmetric-combine pull)
step sym-processes 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as processes "${SYM[@]}" \
  --json "$base/sym-processes.json"
python3 scripts/symmetric_stamps.py < "$base/sym-processes.log" | tee "$base/sym-processes.summary" | tail -12
step sym-processes-nostamps 40 "${BENCH[@]}" --ranks-as processes "${SYM[@]}" --json "$base/sym-processes-2.json"
step sym-threads-nostamps 40 "${BENCH[@]}" --ranks-as threads "${SYM[@]}" --json "$base/sym-threads-2.json"
echo "total $((SECONDS - step_start)) s"
