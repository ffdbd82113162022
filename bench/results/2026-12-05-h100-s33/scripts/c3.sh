#!/usr/bin/env bash
# Session 33's c3: the MoE layer with GEMM 2 writing its rows home (MoeExpertOutput::home, issue 22's launch 2
# epilogue: cuda/moe/home_rows_epilogue.cuh), first run on a GPU:
#   - the layer suite's fp8 cases (home against local, bitwise, W1 in both layouts), the graph replay with
#     rows home, the bf16 refusal;
#   - memcheck on the one-rank fp8 case (the home layer's bulk copies included);
#   - switchyard-moe-bench local against home at 128 tokens (threads and processes) and 4096 (threads).
# Repack first:
#   SWITCHYARD_PACK_ONLY='(moe_layer_test|switchyard-moe-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry33/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry33/c3.tar.xz"; BUDGET=500
STEP_FILTER="rror|PASSED|FAILED|ERROR SUMMARY|^layer|^  (dispatch|gemm|swiglu|combine)|check|verdict"
source scripts/device-call.sh
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench
step suite-moe-fp8 150 $T/switchyard_cuda_moe_layer_test --gtest_brief=1 --gtest_filter='*fp8*:*Refusals*'
step memcheck-moe-home 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_moe_layer_test \
  --gtest_brief=1 --gtest_filter='*Small_R1_fp8*'
for output in local home; do
  step moe128-threads-$output 45 "$M" --tokens 128 --iters 10 --warmup 2 --expert-output $output \
    --json "$base/moe128-threads-$output.json"
done
start_mps
for output in local home; do
  step moe128-processes-$output 75 "$M" --tokens 128 --iters 10 --warmup 2 --ranks-as processes \
    --expert-output $output --json "$base/moe128-processes-$output.json"
done
for output in local home; do
  step moe4096-threads-$output 75 "$M" --tokens 4096 --iters 3 --warmup 1 --expert-output $output \
    --json "$base/moe4096-threads-$output.json"
done
echo "total $((SECONDS - step_start)) s"
