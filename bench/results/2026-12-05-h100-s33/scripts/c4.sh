#!/usr/bin/env bash
# Session 33's c4: the SwiGLU epilogue after its plumbing moved into cuda/moe/direct_epilogue.cuh (shared with
# the rows-home epilogue): its tests and the layer's fp8 cases (SwiGLU epilogue and rows home), bitwise.
# Repack first:
#   SWITCHYARD_PACK_ONLY='moe_layer_test' SWITCHYARD_PACK_OUT=build/gpu-carry33/c4.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry33/c4.tar.xz"; BUDGET=170
STEP_FILTER="rror|PASSED|FAILED"
source scripts/device-call.sh
step suite-moe-swiglu-fp8 150 $B/tests/cuda/switchyard_cuda_moe_layer_test --gtest_brief=1 \
  --gtest_filter='*Swiglu*:*fp8*'
echo "total $((SECONDS - step_start)) s"
