#!/usr/bin/env bash
# Session 27, call 3: call 2 found one pipeline stage fewer (s5) cutting GEMM 1's cold DRAM reads 41.3 -> 28.3 GB
# and GEMM 2's 6.8 -> 4.8, with the steady-state one-rank layer level to -2.5 %; TMA L2 hints and a smaller grid
# were worse. Here: 4 and 3 stages too (cold DRAM), then the target itself: the layer at 4096 x 8 (threads)
# for s6 (as landed), s5, s4, s3, interleaved with torch's two fp8 grouped GEMMs alone, three rounds.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry27/c3.tar.gz"; BUDGET=420
STEP_FILTER="rror|dram__bytes_read|gpu__time_duration|sm__cycles_elapsed|^layer|^alone|torch|fp8"
source scripts/device-call.sh
RUN1="--ranks 1 --tokens 32768 --check-tokens 0 --gate-up interleaved --warmup 0 --iters 1"
NCU="ncu --clock-control none --kernel-name regex:device_kernel --metrics dram__bytes_read.sum,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --launch-count 2"
for v in s4 s3; do
  step ncu-$v 30 $NCU $B/v$v/switchyard-moe-bench $RUN1
done
for round in 1 2 3; do
  step torch-r$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-r$round.json"
  for v in s6 s5 s4 s3; do
    step layer-$v-r$round 30 $B/v$v/switchyard-moe-bench --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json $base/layer-$v-r$round.json
  done
done
echo "total $((SECONDS - step_start)) s"
