#!/usr/bin/env bash
# Session 23, call 3: what bounds the SwiGLU kernel now (call 2: 810 us at one rank for ~2.5 GB, ~3.1 TB/s,
# against ~0.63 ms at the HBM speed of the run): Nsight Compute on it at one rank with all 256 experts
# (32768 tokens), with the memory, occupancy and warp-state sections.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry23/c2.tar.gz"; BUDGET=200
STEP_FILTER="Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Warp Cycles Per Issued|Issue Slots|rror"
source scripts/device-call.sh
MB=$B/tools/moe_bench/switchyard-moe-bench
step ncu-swiglu 150 ncu --clock-control none --kernel-name regex:'swiglu_to_fp8' --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section LaunchStats --section SchedulerStats --metrics dram__bytes_read.sum,dram__bytes_write.sum -o "$base/swiglu" $MB --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0
ncu --import "$base/swiglu.ncu-rep" --page details > "$base/swiglu-details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Ipc|Block Limit|dram__bytes|Theoretical Occ|Stall" "$base/swiglu-details.txt" | head -40
echo "total $((SECONDS - step_start)) s"
