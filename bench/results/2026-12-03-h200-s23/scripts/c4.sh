#!/usr/bin/env bash
# Session 23, call 4: the SwiGLU kernel compiled for 8 blocks per SM (64 registers; call 3: 80 registers,
# 6 blocks, 81 % of DRAM bandwidth). The MoE suite on it; the one-rank layer (32768 tokens) old / new
# interleaved twice; Nsight Compute on the new kernel; the layer at 4096 tokens as 8 threads, new.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry23/c4.tar.gz"; BUDGET=330
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^  swiglu|verdict|rror|Duration|DRAM Throughput|Achieved Occ|Registers Per"
source scripts/device-call.sh
step moe-layer 110 $B/new/tests/cuda/switchyard_cuda_moe_layer_test --gtest_brief=1
for round in 1 2; do
  for v in old new; do
    step one-rank-$v-r$round 40 $B/$v/tools/moe_bench/switchyard-moe-bench --ranks 1 --tokens 32768 --iters 5 --warmup 1 --check-tokens 0 --json "$base/one-rank-$v-r$round.json"
  done
done
step ncu-swiglu 60 ncu --clock-control none --kernel-name regex:'swiglu_to_fp8' --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
  -o "$base/swiglu" $B/new/tools/moe_bench/switchyard-moe-bench --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0
ncu --import "$base/swiglu.ncu-rep" --page details > "$base/swiglu-details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per" "$base/swiglu-details.txt"
step layer4096-threads-new 80 $B/new/tools/moe_bench/switchyard-moe-bench --tokens 4096 --iters 5 --warmup 1 --json "$base/layer4096-threads-new.json"
echo "total $((SECONDS - step_start)) s"
