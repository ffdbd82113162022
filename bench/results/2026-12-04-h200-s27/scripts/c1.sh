#!/usr/bin/env bash
# Session 27, call 1: why GEMM 1 reads ~4x its operands from DRAM now (session 26: 29-38 GB) when session 21's
# profile of the same 128 x 128 x 128 kernel family read 10.9 GB (L2 hit 79 %, 1.58 GHz). Between them: h in
# bf16 (6 stages instead of 5), the SwiGLU epilogue, the fp8 push dispatch writing GEMM 1's A. Nsight Compute on
# every device_kernel launch of one moe-bench run at one rank (32768 tokens, --warmup 0 --iters 1): launches
# 0/1 the first layer call's GEMMs, 2/3 the timed call's, 4/5 the GEMMs alone on the bench's own synthetic A,
# 6/7 at full capacity, 8/9 alone on zeroed A. Then the pull instead of the push, W1 in halves, x in the heap.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry27/c1.tar.gz"; BUDGET=330
STEP_FILTER="rror|dram__bytes_read|gpu__time_duration|sm__cycles_elapsed|lts__t_sector_hit|Compression|L2 Hit"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
RUN="--ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0"
NCU="ncu --clock-control none --kernel-name regex:device_kernel --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct"
step a-push-interleaved 100 $NCU --launch-count 10 $MB $RUN --gate-up interleaved
step b-pull-interleaved 50 env SWITCHYARD_SYMMETRIC_PULL=warps $NCU --launch-count 4 $MB $RUN --gate-up interleaved
step c-push-halves 60 $NCU --launch-count 6 $MB $RUN --gate-up halves
step d-heap-interleaved 50 $NCU --launch-count 4 $MB $RUN --gate-up interleaved --heap on
step e-tables 60 ncu --clock-control none --kernel-name regex:device_kernel --launch-count 1 --section MemoryWorkloadAnalysis_Tables --section MemoryWorkloadAnalysis $MB $RUN --gate-up interleaved
echo "total $((SECONDS - step_start)) s"
