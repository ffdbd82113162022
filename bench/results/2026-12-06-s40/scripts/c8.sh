#!/usr/bin/env bash
# Session 40, call 8: the rest of the suites for c7's build (the row tables on warp scans): rank masks, hostile
# calls, the MoE layer (its dispatch pushes and its combine builds the same tables).
# Pack: SWITCHYARD_PACK_ONLY='(rank_mask_test|hostile_calls_test|moe_layer_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40e/c8.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c8; CARRY="build/gpu-carry40e/c8.tar.xz"; BUDGET=300
STEP_FILTER="rror|FAILED|PASSED|passed"
source scripts/device-call.sh
C=$B/tests/cuda
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
