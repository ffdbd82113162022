#!/usr/bin/env bash
# Session 25, call 4: what bounds the fp8 push (Nsight Compute on the symmetric dispatch kernel inside the
# layer, one rank with 32768 tokens and 8 ranks with 4096), and the pull combine beside it.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry25/c3.tar.gz"; BUDGET=200
STEP_FILTER="Duration|DRAM Throughput|Memory Throughput|SM Frequency|Registers|Achieved Occupancy|Issue Slots|Stall|L2 Cache Throughput|Compute \\(SM\\)|rror"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
NCU="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats"
step ncu-dispatch-one-rank 60 $NCU --kernel-name regex:symmetric_dispatch --launch-skip 1 --launch-count 1 $MB --ranks 1 --tokens 32768 --warmup 1 --iters 1 --check-tokens 0 --gate-up interleaved
step ncu-combine-one-rank 60 $NCU --kernel-name regex:combine --launch-skip 1 --launch-count 1 $MB --ranks 1 --tokens 32768 --warmup 1 --iters 1 --check-tokens 0 --gate-up interleaved
echo "total $((SECONDS - step_start)) s"
