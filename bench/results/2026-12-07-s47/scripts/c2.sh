#!/usr/bin/env bash
# Session 46's next-c2.sh, run in session 47. This session's changes as processes: c2 and c3 ran the
# suites with ranks as threads only. The process-ranks round trips at 4 and 8 for low_latency and symmetric (with
# and without heap tensors), and the one-rank and 8-process symmetric decode call on the new write_layout
# (c3's figures again, on whatever card comes).
# Pack: SWITCHYARD_PACK_ONLY='(process_ranks|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry47/proc.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: every round trip passes; one rank ~47 us dispatch on an H100 (c3), 8 processes ~113 us (H100) or
# ~99 us (H200, session 43).
cd "$(dirname "$0")/../../../.."
CALL=s47c2; CARRY=${CARRY:-build/gpu-carry47/proc.tar.xz}; BUDGET=${BUDGET:-460}
STEP_FILTER="rror|FAIL|passed|^  symmetric +[0-9]"
source scripts/device-call.sh
C=$B/tests/cuda; BENCH=$B/tools/bench/switchyard-bench
step one-rank 40 $BENCH --backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 --warmup 5 \
  --symmetric-heap on --symmetric-combine pull --json "$base/one-rank.json"
# Session 47: where the one-rank call's 47 us go now that write_layout is one range: its stamps (the fixed steps)
# and ncu's source page summarised (the next hot loops: RowTables::build's warp scans, place_routes' sums).
step one-rank-stamps 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH --backend cuda --engine symmetric --ranks 1 \
  --tokens 128 --iters 40 --warmup 5 --symmetric-heap on --symmetric-combine pull --json "$base/one-rank-stamps.json"
stamps_summary one-rank-stamps
step ncu-one-rank-sass 150 ncu --clock-control none -k regex:symmetric_dispatch -s 3 -c 1 --section SourceCounters \
  --page source --print-source sass --csv $BENCH --backend cuda --engine symmetric \
  --ranks 1 --tokens 128 --iters 3 --warmup 2 --symmetric-heap on --symmetric-combine pull
python3 scripts/ncu_sass_hotspots.py --top 6 --window 1024 "$base/ncu-one-rank-sass.log" \
  > "$base/ncu-one-rank-sass-hotspots.txt" 2>&1 && head -40 "$base/ncu-one-rank-sass-hotspots.txt"
xz -9 "$base/ncu-one-rank-sass.log"
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
