#!/usr/bin/env bash
# Session 26, call 4: Nsight Compute only, call 1's build. Call 3 found GEMM 1 with the SwiGLU epilogue reading
# ~40.8 GB from DRAM at one rank (32768 tokens; its operands are ~9.3 GB). Which GEMM 1 reads how much: the
# plain m128 tile (W1 in halves), m128_cluster2n and m128_cluster2m, the SwiGLU kernel (interleaved), and GEMM 2.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry26/c1.tar.gz"; BUDGET=300
STEP_FILTER="rror|Duration|DRAM Throughput|SM Frequency|dram__bytes|lts__t_sectors|L2 Hit"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
RUN="--ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0"
NCU="ncu --clock-control none --kernel-name regex:device_kernel --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"
step gemm1-m128 40 $NCU --launch-skip 0 $MB $RUN --gate-up halves
step gemm1-cluster2n 40 env SWITCHYARD_MOE_GEMM_TILES=m128_cluster2n,m128 $NCU --launch-skip 0 $MB $RUN --gate-up halves
step gemm1-cluster2m 40 env SWITCHYARD_MOE_GEMM_TILES=m128_cluster2m,m128 $NCU --launch-skip 0 $MB $RUN --gate-up halves
step gemm1-swiglu 40 $NCU --launch-skip 0 $MB $RUN --gate-up interleaved
step gemm2-m128 40 $NCU --launch-skip 1 $MB $RUN --gate-up interleaved
echo "total $((SECONDS - step_start)) s"
