#!/usr/bin/env bash
# Session 23, call 2: silu with the hardware's exp2 and reciprocal on the GPU (call 1: with h in bf16 the
# SwiGLU kernel became issue-bound, 1163 us for 2.5 GB). The MoE suite and memcheck again (the GPU's bits
# changed); the layer at 4096 tokens as 8 threads and 8 processes with torch's two fp8 grouped GEMMs before,
# between and after them (the GPU's clocks drift over a call); the one-rank split; 128 tokens. Then what
# session 22 left unrun: racecheck and synccheck on the symmetric one-rank cases (the new combine), and the
# engines as 8 processes (process_ranks_test, MPS).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry23/c2.tar.gz"; BUDGET=570
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|tokens  4096|pass|fail"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 120 ${T}_moe_layer_test --gtest_brief=1
step memcheck-moe 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*Small_R1*:*Epilogue*:*Tile*'
step one-rank-32768 60 $MB --ranks 1 --tokens 32768 --iters 5 --warmup 1 --json "$base/one-rank.json"
step torch-1 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-1.json"
step layer4096-threads 90 $MB --tokens 4096 --iters 5 --warmup 1 --json "$base/layer4096-threads.json"
step torch-2 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-2.json"
step layer128-threads 80 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-threads.json"
step racecheck-symmetric 60 compute-sanitizer --tool racecheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1*'
step synccheck-symmetric 60 compute-sanitizer --tool synccheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1*'
start_mps
step layer4096-processes 100 $MB --tokens 4096 --iters 5 --warmup 1 --ranks-as processes --heap on --json "$base/layer4096-processes.json"
step torch-3 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-3.json"
for engine in normal low_latency symmetric; do
  step processes-$engine-np8 60 $B/tests/cuda/switchyard_cuda_process_ranks_test --ranks 8 --engine $engine
done
step processes-symmetric-heap-np8 60 $B/tests/cuda/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
echo "total $((SECONDS - step_start)) s"
