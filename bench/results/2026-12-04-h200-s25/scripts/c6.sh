#!/usr/bin/env bash
# Session 25, call 6: repeat_interleaved_w1_scales reads the weight layout's w1_scale_row_of_stored instead of
# its own copy of the formula (the same rows). The MoE suite (the epilogue against the separate path, the
# interleaved layer against halves, bitwise).
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry25/c6.tar.gz"; BUDGET=150
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
step moe-layer 110 ${T}_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
