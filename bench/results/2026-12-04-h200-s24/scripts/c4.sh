#!/usr/bin/env bash
# Session 24, call 4: the SwiGLU epilogue with fewer instructions (hardware bf16 rounding on the GPU, slots
# and columns from the fragment layout, the clamp tested once a tile). The MoE suite and memcheck on the
# epilogue; Nsight Compute's instruction count of GEMM 1 with the epilogue; halves against interleaved at one
# rank and at 4096 tokens (8 threads, 8 processes) beside torch, alternating.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry24/c4.tar.gz"; BUDGET=520
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8|Duration|SM Frequency|Executed Instructions  "
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 150 $T --gtest_brief=1
step memcheck-epilogue 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='*Epilogue*:*Small_R1_fp8*'
step ncu-gemm1-interleaved 60 ncu --clock-control none --kernel-name regex:device_kernel --launch-count 1 \
  --section SpeedOfLight --section InstructionStats \
  "$MB" --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up interleaved
for round in 1 2; do
  step one-rank-halves-r$round 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --json "$base/one-rank-halves-r$round.json"
  step one-rank-interleaved-r$round 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-interleaved-r$round.json"
done
for round in 1 2; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-halves-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --json "$base/layer-threads-halves-r$round.json"
  step layer-threads-interleaved-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-threads-interleaved-r$round.json"
done
step layer-threads-interleaved-checked 90 $MB --tokens 4096 --iters 2 --warmup 1 --check-tokens 2 --gate-up interleaved --json "$base/layer-threads-interleaved-checked.json"
start_mps
for round in 1 2; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-halves-r$round 60 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --json "$base/layer-processes-halves-r$round.json"
  step layer-processes-interleaved-r$round 60 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-interleaved-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
