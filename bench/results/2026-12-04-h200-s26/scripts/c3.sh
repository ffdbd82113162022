#!/usr/bin/env bash
# Session 26, call 3: GEMM 1's SwiGLU pair in one CTA, the even tile kept in a global scratch buffer (call 2 kept
# it in registers: ptxas spilled, GEMM 1 +19 %). The MoE suite; memcheck on a small layer; Nsight Compute on
# GEMM 1 at one rank for this build and for call 1's (the cluster pair); the layer at one rank and at 4096 x 8
# (threads; processes with heap tensors), this build against call 1's and torch's two fp8 GEMMs, alternating.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry26/c3.tar.gz"; BUDGET=560
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^  (dispatch|gemm 1|combine)|verdict|rror|fp8:|Duration|DRAM Throughput|SM Frequency|local|pipe_tensor"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
MB1=$B/tools/moe_bench/switchyard-moe-bench-c1
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
TINY="--ranks 2 --experts 8 --hidden 512 --intermediate 256 --tokens 300 --iters 1 --warmup 0 --check-tokens 8 --gate-up interleaved"
step memcheck-layer 60 compute-sanitizer --tool memcheck --error-exitcode 9 $MB $TINY
step one-rank-new 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-new.json"
step one-rank-c1 40 $MB1 --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-c1.json"
NCU="ncu --clock-control none --kernel-name regex:device_kernel --launch-skip 0 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,dram__bytes_read.sum,dram__bytes_write.sum"
step ncu-gemm1-new 60 $NCU $MB --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up interleaved
step ncu-gemm1-c1 60 $NCU $MB1 --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up interleaved
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-new-t$round 30 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-new-t$round.json"
  step layer-c1-t$round 30 $MB1 --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-c1-t$round.json"
done
step layer-128-new 25 $MB --tokens 128 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-128-new.json"
step layer-128-c1 25 $MB1 --tokens 128 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-128-c1.json"
start_mps
for round in 1 2 3; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-new-p$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-new-p$round.json"
  step layer-c1-p$round 40 $MB1 --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-c1-p$round.json"
done
step layer-check-processes 150 $MB --tokens 256 --iters 2 --warmup 1 --check-tokens 4 --ranks-as processes --heap on --gate-up interleaved
echo "total $((SECONDS - step_start)) s"
