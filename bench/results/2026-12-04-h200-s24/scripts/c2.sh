#!/usr/bin/env bash
# Session 24, call 2 (the build of call 1): what the SwiGLU epilogue costs inside GEMM 1. Nsight Compute on
# GEMM 1 at one rank, 32768 tokens, with the epilogue (W1 interleaved) and without (halves: bf16 h), with
# per-instruction stall samples; racecheck and synccheck on the epilogue test (call 1's filter matched no
# test); the layer at 128 tokens, halves against interleaved.
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry24/c1.tar.gz"; BUDGET=480
STEP_FILTER="Duration|SM Frequency|Throughput|PASSED|FAILED|SUMMARY|rror|^layer|^alone|^  (dispatch|gemm|swiglu|combine)"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test
MB=$B/tools/moe_bench/switchyard-moe-bench
for layout in interleaved halves; do
  step ncu-gemm1-$layout 120 ncu --clock-control none --kernel-name regex:device_kernel --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
    -o "$base/gemm1-$layout" "$MB" --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up $layout
  ncu --import "$base/gemm1-$layout.ncu-rep" --page details > "$base/gemm1-$layout-details.txt" 2>&1
  ncu --import "$base/gemm1-$layout.ncu-rep" --page source --print-source sass --csv > "$base/gemm1-$layout-sass.csv" 2>&1
  gzip -f "$base/gemm1-$layout-sass.csv"; rm -f "$base/gemm1-$layout.ncu-rep"
  grep -E "Duration|SM Frequency|gmma|Issue Slots Busy|No Eligible" "$base/gemm1-$layout-details.txt" | head -8
done
step racecheck-epilogue 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_filter='*MoeSwigluEpilogue*no_clamp*'
step synccheck-epilogue 60 compute-sanitizer --tool synccheck --error-exitcode 9 "$T" --gtest_filter='*MoeSwigluEpilogue*no_clamp*'
step layer128-halves 75 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-halves.json"
step layer128-interleaved 75 $MB --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/layer128-interleaved.json"
echo "total $((SECONDS - step_start)) s"
