#!/usr/bin/env bash
# Session 27, call 4: call 3 found GEMM 1 at 4 stages reading exactly its operands from DRAM when cold (9.41 GB
# against 41.3 at 6 stages; 13.31 ms against 14.88), but three 4096 x 8 rounds too noisy to tell in steady state.
# Here five rounds, the order rotated each round: torch's two fp8 GEMMs, s6 (as landed), g1s4 (GEMM 1 at 4
# stages, GEMM 2 at 6), s4 (both at 4); then one rank, s6 and g1s4 alternating. nvidia-smi samples clock,
# power and temperature every 100 ms through the call (smi.csv).
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry27/c4.tar.gz"; BUDGET=300
STEP_FILTER="rror|^layer|^  gemm|^alone|fp8:"
source scripts/device-call.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $base/smi.csv 2>&1 &
smi=$!
torch_step() { step torch-r$1 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-r$1.json"; }
layer_step() { step layer-$2-r$1 30 $B/v$2/switchyard-moe-bench --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json $base/layer-$2-r$1.json; }
for round in 1 2 3 4 5; do
  order=(torch s6 g1s4 s4)
  for i in 0 1 2 3; do
    item=${order[$(( (i + round) % 4 ))]}
    if [ "$item" = torch ]; then torch_step $round; else layer_step $round $item; fi
  done
done
for round in 1 2; do
  for v in s6 g1s4; do
    step one-$v-r$round 30 $B/v$v/switchyard-moe-bench --ranks 1 --tokens 32768 --check-tokens 0 --gate-up interleaved --warmup 2 --iters 5 --json $base/one-$v-r$round.json
  done
done
kill $smi
echo "total $((SECONDS - step_start)) s"
