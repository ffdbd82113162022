#!/usr/bin/env bash
# Session 28, call 7: the normal dispatch's sender reading x through L1 (ld.global.nc, allocated: a token goes
# to ~5 of 8 ranks, one warp group per rank in the same block, as DeepEP's __ldg) instead of around it (v7),
# and v7 with the receivers' TMA staging halved to 96 KiB so that L1 has room (v8); v5 = call 6's landed build.
# switchyard-bench as processes (MPS), rotating.
cd "$(dirname "$0")/../../../.."
CALL=c7; CARRY="build/gpu-carry28/c7.tar.gz"; BUDGET=300
STEP_FILTER="rror|^  (dispatch|combine)|verdict: fail"
source scripts/device-call.sh
start_mps
run() { local name=$1 v=$2 ranks=$3; shift 3
  step $name 45 $B/switchyard-bench-$v --backend cuda --engine normal --ranks $ranks --tokens 4096 --iters 5 --warmup 2 --ranks-as processes --json $base/$name.json "$@"; }
for round in 1 2; do for v in v5 v7 v8; do run $v-r8-$round $v 8; done; done
for v in v5 v7 v8; do run $v-r8-fp8 $v 8 --dtype fp8; done
for v in v5 v7 v8; do run $v-r4 $v 4; done
echo "total $((SECONDS - step_start)) s"
