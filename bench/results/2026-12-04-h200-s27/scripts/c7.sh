#!/usr/bin/env bash
# Session 27, call 7: call 6's 128-token layer had 6 of its 10 timed calls at 4.2-7.1 ms (ranks' dispatch
# phases ending 3.5-3.9 ms late, behind other ranks' GEMMs), where session 26's 128-token runs (6-stage
# GEMM 1) had none in 10. Is it the 4-stage GEMM 1? The layer at 8 x 128 (threads, 3 warm-up calls, 10 timed),
# old (call 2's s6 build: session 26's kernels) and new (landed), alternating, three rounds each; per-call
# times from the JSON. The new build with --timeline once more.
cd "$(dirname "$0")/../../../.."
CALL=c7; CARRY="build/gpu-carry27/c7.tar.gz"; BUDGET=200
STEP_FILTER="rror|^layer|^alone|^weights|verdict"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
OLD=$B/vs6/switchyard-moe-bench
P128="--tokens 128 --check-tokens 0 --gate-up interleaved"
for round in 1 2 3; do
  step l128-old-r$round 30 $OLD $P128 --json $base/l128-old-r$round.json
  step l128-new-r$round 30 $MB $P128 --json $base/l128-new-r$round.json
done
step l128-new-timeline 30 $MB $P128 --timeline --json $base/l128-new-timeline.json
for f in $base/l128-*.json; do
  python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
calls = [max(r['layer_us'][i] for r in j['per_rank']) for i in range(len(j['per_rank'][0]['layer_us']))]
print(sys.argv[1].split('/')[-1], 'per call (slowest rank):', ' '.join(str(round(c)) for c in calls))
" $f
done
echo "total $((SECONDS - step_start)) s"
