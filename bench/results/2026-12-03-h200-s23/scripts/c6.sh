#!/usr/bin/env bash
# Session 23, call 6: the review's refactor (the SwiGLU kernel's bf16 unpack moved into device/bf16x8.cuh,
# beside the combines' helpers): the MoE suite and memcheck on its one-rank cases.
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry23/c6.tar.gz"; BUDGET=200
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
step moe-layer 110 ${T}_moe_layer_test --gtest_brief=1
step memcheck-moe 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*Small_R1*:*Epilogue*:*Tile*'
echo "total $((SECONDS - step_start)) s"
