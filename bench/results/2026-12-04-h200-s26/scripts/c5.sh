#!/usr/bin/env bash
# Session 26, call 5: the grouped GEMMs' tile order (SWITCHYARD_MOE_GEMM_ORDER: raster along M or N, swizzle 1-8).
# The MoE layer test with a non-default order (the bits must not move); at one rank each order's layer phases and
# Nsight Compute's DRAM reads of GEMM 1; then every order at 4096 x 8 (threads, and processes with heap tensors)
# beside torch's two fp8 GEMMs, two rounds each.
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry26/c5.tar.gz"; BUDGET=420
STEP_FILTER="PASSED|FAILED|^layer|^  (gemm 1|gemm 2)|verdict|rror|fp8:|Duration|SM Frequency|dram__bytes_read"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
ORDERS="m1 m2 m4 m8 n1 n2 n4 n8"
step moe-layer-n4 90 env SWITCHYARD_MOE_GEMM_ORDER=n4 ${T}_moe_layer_test --gtest_brief=1 --gtest_filter='Recipes/MoeLayerCuda.*:*Epilogue*'
for order in $ORDERS; do
  step one-rank-$order 25 env SWITCHYARD_MOE_GEMM_ORDER=$order $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-$order.json"
done
NCU="ncu --clock-control none --kernel-name regex:device_kernel --launch-count 1 --launch-skip 0 --section SpeedOfLight --metrics dram__bytes_read.sum"
for order in m1 m4 m8 n1 n4 n8; do
  step ncu-gemm1-$order 25 env SWITCHYARD_MOE_GEMM_ORDER=$order $NCU $MB --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up interleaved
done
for round in 1 2; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  for order in $ORDERS; do
    step layer-$order-t$round 25 env SWITCHYARD_MOE_GEMM_ORDER=$order $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-$order-t$round.json"
  done
done
start_mps
for round in 1 2; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  for order in $ORDERS; do
    step layer-$order-p$round 30 env SWITCHYARD_MOE_GEMM_ORDER=$order $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-$order-p$round.json"
  done
done
echo "total $((SECONDS - step_start)) s"
