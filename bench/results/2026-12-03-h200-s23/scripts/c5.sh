#!/usr/bin/env bash
# Session 23, call 5: issue 21's 4096-token target measured as rounds (call 2 and call 4 put the same layer
# ~1 ms apart as 8 threads): torch's two fp8 grouped GEMMs and the landed layer alternately, three rounds as
# 8 threads, then two as 8 processes with heap tensors (MPS). The binary is the landed build (c4's "old").
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry23/c4.tar.gz"; BUDGET=420
STEP_FILTER="^layer|^alone|verdict|rror|tokens  4096"
source scripts/device-call.sh
MB=$B/old/tools/moe_bench/switchyard-moe-bench
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-r$round 60 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --json "$base/layer-threads-r$round.json"
done
start_mps
for round in 1 2; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-r$round 70 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --json "$base/layer-processes-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
