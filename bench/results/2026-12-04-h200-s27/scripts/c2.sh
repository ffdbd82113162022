#!/usr/bin/env bash
# Session 27, call 2: call 1 found GEMM 1 reading 40-54 GB from DRAM (9.3 GB of operands) in every variant of
# where its A lives (push, pull, heap, the bench's own buffer): the kernel, not the data, decides. Variants of
# the fp8 mainloop (experiment builds of moe-bench, not committed: only the two fp8 GEMM translation units
# rebuilt): s6 = as landed (6 stages) plus an SMs knob for the persistent grid; s5 = one stage fewer (session
# 21's 10.9 GB kernel had 5); al = TMA L2 hints A evict_last, B evict_first; bl = A evict_first, B evict_last.
# Each: Nsight Compute on the layer's two GEMMs (one launch each, cold), then the layer at one rank timed
# (steady state), in two interleaved rounds.
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry27/c2.tar.gz"; BUDGET=420
STEP_FILTER="rror|dram__bytes_read|gpu__time_duration|sm__cycles_elapsed|^layer|^  gemm|^alone"
source scripts/device-call.sh
RUN="--ranks 1 --tokens 32768 --check-tokens 0 --gate-up interleaved"
NCU="ncu --clock-control none --kernel-name regex:device_kernel --metrics dram__bytes_read.sum,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct --launch-count 2"
for v in s6 s5 al bl; do
  step ncu-$v 30 $NCU $B/v$v/switchyard-moe-bench $RUN --warmup 0 --iters 1
done
for round in 1 2; do
  for v in s6 s5 al bl; do
    step time-$v-r$round 30 $B/v$v/switchyard-moe-bench $RUN --warmup 2 --iters 5 --json $base/time-$v-r$round.json
  done
  step time-s6-sms120-r$round 30 env SWITCHYARD_EXPERIMENT_GEMM_SMS=120 $B/vs6/switchyard-moe-bench $RUN --warmup 2 --iters 5
done
step ncu-s6-sms120 30 env SWITCHYARD_EXPERIMENT_GEMM_SMS=120 $NCU $B/vs6/switchyard-moe-bench $RUN --warmup 0 --iters 1
echo "total $((SECONDS - step_start)) s"
