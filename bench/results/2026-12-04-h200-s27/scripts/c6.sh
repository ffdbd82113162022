#!/usr/bin/env bash
# Session 27, call 6: where the layer's 1.5-2.6 ms beyond its GEMMs go at 4096 x 8 (call 5). moe-bench
# --timeline (new): every rank's phase marks of one timed call against one origin, so the 8 ranks' dispatch,
# GEMMs and combine line up on the GPU's clock; at 4096 and 128 tokens. Then the push dispatch's phase stamps
# at 8 x 4096 (session 26's plan; sessions 25-26 left out --expert-capacity auto).
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry27/c6.tar.gz"; BUDGET=240
STEP_FILTER="rror|^layer|^alone|^timeline|^  rank|^ +[0-9]+ |verdict|stamp|barrier|released|drained|^  (dispatch|combine)"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
SB=$B/tools/bench/switchyard-bench
for round in 1 2; do
  step timeline-4096-r$round 40 $MB --tokens 4096 --check-tokens 0 --gate-up interleaved --timeline --json $base/timeline-4096-r$round.json
done
step timeline-128 40 $MB --tokens 128 --check-tokens 0 --gate-up interleaved --timeline --json $base/timeline-128.json
step push-stamps 90 bash -c "SWITCHYARD_SYMMETRIC_STAMPS=1 $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --expert-capacity auto --json $base/push-stamps.json 2>&1 | tee $base/push-stamps-raw.log | python3 scripts/symmetric_stamps.py; grep -E '^  (dispatch|combine)' $base/push-stamps-raw.log"
echo "total $((SECONDS - step_start)) s"
