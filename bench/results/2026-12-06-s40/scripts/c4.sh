#!/usr/bin/env bash
# Session 40, call 4: the rest of the suites for c3's change (the push's flat walk, the tables in one pass):
# rank masks, hostile calls, a killed rank, and the MoE layer (its dispatch is the fp8 push).
# Pack: SWITCHYARD_PACK_ONLY='(rank_mask_test|hostile_calls_test|killed_rank_test|moe_layer_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40b/c3b.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c4; CARRY="build/gpu-carry40b/c3b.tar.xz"; BUDGET=400
STEP_FILTER="rror|FAILED|PASSED|passed"
source scripts/device-call.sh
C=$B/tests/cuda
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step killed 60 $C/switchyard_cuda_killed_rank_test --gtest_brief=1
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
