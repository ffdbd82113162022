#!/usr/bin/env bash
# Session 40, call 2: where the symmetric push's fixed cost goes at 128 tokens x 8 ranks, with three more stamps
# (counted: the routing's count before its grid sync; tables loaded: records and counts read after the barrier;
# walked: the push's walk before the release). Measurement only, no prediction: it splits c1's spans (start ->
# routed ~9.4 us for the last rank, passed -> issued 9.0, drained -> released ~25) before anything is changed.
# Processes (two runs) and threads (one). Pack:
#   SWITCHYARD_PACK_ONLY='(symmetric_test|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry40/c2.tar.xz \
#     bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c2; CARRY="build/gpu-carry40/c2.tar.xz"; BUDGET=200
STEP_FILTER="rror|FAILED|PASSED|^  symmetric +[0-9]"
source scripts/device-call.sh
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
bin=$B/tools/bench/switchyard-bench
start_mps
for run in 1 2; do
  step p128-$run 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --ranks-as processes --json "$base/p128-$run.json"
  python3 scripts/symmetric_stamps.py < "$base/p128-$run.log" > "$base/p128-$run.summary" 2>&1
  sed -n '/^phase/,$p' "$base/p128-$run.summary"
done
echo quit | nvidia-cuda-mps-control; sleep 2
step t128 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --json "$base/t128.json"
python3 scripts/symmetric_stamps.py < "$base/t128.log" > "$base/t128.summary" 2>&1
sed -n '/^phase/,$p' "$base/t128.summary"
echo "total $((SECONDS - step_start)) s"
