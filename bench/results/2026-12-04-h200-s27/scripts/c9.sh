#!/usr/bin/env bash
# Session 27, call 9: main's final build (session 26's kernels; moe-bench warming up 3 calls). Issue 21's
# targets under one protocol, in more rounds than calls 5 and 8: the layer at 4096 x 8 against torch's two fp8
# GEMMs alone, five rounds as threads and three as processes (MPS, heap tensors), the order alternating; the
# layer at 128 tokens x 8 against the weight-read bound, twice.
cd "$(dirname "$0")/../../../.."
CALL=c9; CARRY="build/gpu-carry27/c9.tar.gz"; BUDGET=300
STEP_FILTER="rror|^layer|^weights|^alone|fp8:|verdict"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
P4096="--tokens 4096 --check-tokens 0 --gate-up interleaved"
torch_step() { step torch-$1 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-$1.json"; }
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 1 ]; then torch_step t$round; step layer-t$round 40 $MB $P4096 --json $base/layer-t$round.json
  else step layer-t$round 40 $MB $P4096 --json $base/layer-t$round.json; torch_step t$round; fi
done
for round in 1 2; do
  step l128-r$round 30 $MB --tokens 128 --check-tokens 0 --gate-up interleaved --json $base/l128-r$round.json
done
start_mps
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then torch_step p$round; step layer-p$round 40 $MB $P4096 --ranks-as processes --heap on --json $base/layer-p$round.json
  else step layer-p$round 40 $MB $P4096 --ranks-as processes --heap on --json $base/layer-p$round.json; torch_step p$round; fi
done
echo "total $((SECONDS - step_start)) s"
