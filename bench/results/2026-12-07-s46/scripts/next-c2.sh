#!/usr/bin/env bash
# Prepared in session 46 for the next GPU time (not run). This session's changes as processes: c2 and c3 ran the
# suites with ranks as threads only. The process-ranks round trips at 4 and 8 for low_latency and symmetric (with
# and without heap tensors), and the one-rank and 8-process symmetric decode call on the new write_layout
# (c3's figures again, on whatever card comes).
# Pack: SWITCHYARD_PACK_ONLY='(process_ranks|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry47/proc.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: every round trip passes; one rank ~47 us dispatch on an H100 (c3), 8 processes ~113 us (H100) or
# ~99 us (H200, session 43).
cd "$(dirname "$0")/../../../.."
CALL=s47c2; CARRY=${CARRY:-build/gpu-carry47/proc.tar.xz}; BUDGET=${BUDGET:-420}
STEP_FILTER="rror|FAIL|passed|^  symmetric +[0-9]"
source scripts/device-call.sh
C=$B/tests/cuda; BENCH=$B/tools/bench/switchyard-bench
step one-rank 40 $BENCH --backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 --warmup 5 \
  --symmetric-heap on --symmetric-combine pull --json "$base/one-rank.json"
start_mps
for engine in low_latency symmetric; do
  for ranks in 4 8; do
    step processes-$engine-np$ranks 90 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine
  done
done
step processes-symmetric-heap-np8 90 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
step eight 40 $BENCH --backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer \
  --symmetric-heap on --symmetric-combine pull --ranks-as processes --json "$base/eight.json"
echo "total $((SECONDS - step_start)) s"
