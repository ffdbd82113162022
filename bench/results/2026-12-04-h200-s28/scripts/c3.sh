#!/usr/bin/env bash
# Session 28, call 3: the normal engine at 4096 tokens as processes (MPS), switchyard-bench, A/B in one run:
# v1 = call 2's build (the combine's coordinator receiver, 24 warps); v2 = v1 + a 256-byte L2 prefetch on the
# normal engine's row loads (dispatch and combine senders' inputs, the combine's ring reads), as DeepEP's
# copies load; and v1 with other ring / chunk sizes (DeepEP's combine config 256 / 4; small rings 32 / 8).
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry28/c3.tar.gz"; BUDGET=480
STEP_FILTER="rror|^  (dispatch|combine)|^  host|verdict"
source scripts/device-call.sh
start_mps
run() { local name=$1 v=$2 ranks=$3; shift 3
  step $name 75 $B/switchyard-bench-$v --backend cuda --engine normal --ranks $ranks --tokens 4096 --iters 5 --warmup 2 --ranks-as processes --json $base/$name.json "$@"; }
run v1-r8 v1 8
run v2-r8 v2 8
run v1-r8-ring256c4 v1 8 --ring-slots 256 --chunk-tokens 4
run v2-r4 v2 4
run v1-r4 v1 4
run v1-r8-ring32c8 v1 8 --ring-slots 32 --chunk-tokens 8
run v2-r8-again v2 8
echo "total $((SECONDS - step_start)) s"
