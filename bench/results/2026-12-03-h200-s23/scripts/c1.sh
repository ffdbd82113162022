#!/usr/bin/env bash
# Session 23, call 1: h stored in bf16 (GEMM 1 as fp8_to_bf16, the SwiGLU kernel reading bf16 with 8
# channels a lane and four steps of loads in flight). The MoE suite (the epilogue and tile tests retargeted),
# memcheck on its one-rank cases; then the layer at 4096 tokens as 8 threads and as 8 processes (heap tensors)
# beside torch's two fp8 grouped GEMMs in the same call, the one-rank split at 32768 tokens, and 128 tokens.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry23/c1.tar.gz"; BUDGET=560
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^gemm peak|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
step memcheck-moe 60 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*Small_R1*:*Epilogue*:*Tile*'
step torch-grouped-gemm 45 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch.json"
step layer4096-threads 90 $MB --tokens 4096 --iters 3 --warmup 1 --json "$base/layer4096-threads.json"
step one-rank-32768 90 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --gemm-tiles --json "$base/one-rank.json"
step layer128-threads 50 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-threads.json"
start_mps
step layer4096-processes 110 $MB --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --heap on --json "$base/layer4096-processes.json"
echo "total $((SECONDS - step_start)) s"
