#!/usr/bin/env bash
# Session 28, call 4: the normal engine as processes (MPS), switchyard-bench, A/B in one run, rotating:
# v0 = main's combine (batched receiver, 16 warps); v1 = call 2's (coordinator receiver, 24 warps);
# v3 = v1 + the token's ring rows looked up once per token (a per-warp table in shared memory) instead of
# per 16-byte chunk. At 4096 tokens with the default rings (128 / 16) and small rings (32 / 8); at 128 tokens.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry28/c4.tar.gz"; BUDGET=420
STEP_FILTER="rror|^  (dispatch|combine)|verdict: fail"
source scripts/device-call.sh
start_mps
run() { local name=$1 v=$2 ranks=$3 tokens=$4; shift 4
  step $name 60 $B/switchyard-bench-$v --backend cuda --engine normal --ranks $ranks --tokens $tokens --ranks-as processes --json $base/$name.json "$@"; }
for round in 1 2; do
  for v in v0 v1 v3; do run $v-r8-$round $v 8 4096 --iters 5 --warmup 2; done
done
for v in v0 v3; do run $v-r8-ring32c8 $v 8 4096 --iters 5 --warmup 2 --ring-slots 32 --chunk-tokens 8; done
for v in v0 v3; do run $v-r4 $v 4 4096 --iters 5 --warmup 2; done
for v in v0 v3; do run $v-r8-t128 $v 8 128 --iters 30; done
for v in v0 v3; do run $v-r4-t128 $v 4 128 --iters 30; done
echo "total $((SECONDS - step_start)) s"
