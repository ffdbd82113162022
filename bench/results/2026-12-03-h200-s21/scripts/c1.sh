#!/usr/bin/env bash
# Session 21, call 1: what bounds the m128 fp8 grouped GEMMs (issue 21 at 4096 tokens; session 20's plan,
# item 1): Nsight Compute on the layer's GEMM 1 and GEMM 2 (one rank, all 256 experts, ~960 rows each),
# then on torch's two fp8 grouped GEMMs (the peer) for the same metrics; then the layer at 4096 tokens,
# 8 threads, beside torch's grouped GEMMs in the same call (this session's baseline).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c1; B=$PWD/build/g1
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry21/c1.tar.gz
BUDGET=${BUDGET:-570}; STEP_TAR=c1
STEP_FILTER="^layer|^alone|^gemm peak|torch|TFLOPS|Throughput|Duration|Pipe|rror|Stall|Issue|Warp Cycles"
source scripts/device-step.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
M=$B/tools/moe_bench/switchyard-moe-bench
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section LaunchStats
  --section Occupancy --section InstructionStats
  --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed)
step ncu-layer-gemms 200 ncu --clock-control none --kernel-name regex:device_kernel --launch-count 2 \
  "${SECTIONS[@]}" -o "$base/layer-gemms" "$M" --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0
ncu --import "$base/layer-gemms.ncu-rep" --page details > "$base/layer-gemms-details.txt" 2>&1
step ncu-torch-gemms 120 ncu --clock-control none --kernel-name regex:'device_kernel|gemm|Gemm' --launch-count 2 \
  "${SECTIONS[@]}" -o "$base/torch-gemms" python3 tools/peer/torch_grouped_gemm.py --tokens 4096 \
  --recipes fp8 --warmup 0 --iters 1
ncu --import "$base/torch-gemms.ncu-rep" --page details > "$base/torch-gemms-details.txt" 2>&1
step layer4096-threads 110 "$M" --tokens 4096 --iters 3 --warmup 1 --json "$base/layer4096-threads.json"
step torch-grouped-gemm 80 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --json "$base/torch.json"
echo "total $((SECONDS - step_start)) s"
