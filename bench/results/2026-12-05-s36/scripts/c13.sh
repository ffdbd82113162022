#!/usr/bin/env bash
# Session 36, call 13: the stand-in of a dispatch that fails after the count exchange, extended to the counts
# copied back (the notify now leaves -1 rows until its exchange passes) and to the hierarchical engine
# (InternodeEngine: the whole dispatch into outputs of its own). The normal suite (CudaNormalFailedDispatch on
# four paths), the internode suite's error cases first, then the whole internode suite.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|internode_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry36/c13.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c13; CARRY="build/gpu-carry36/c13.tar.xz"; BUDGET=330
STEP_FILTER="rror|FAILED|PASSED|fail|^==|tests ran"
source scripts/device-call.sh
step suite-normal 90 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1
step internode-errors 90 $B/tests/cuda/switchyard_cuda_internode_test --gtest_brief=1 --gtest_filter='CudaInternodeErrors.*'
step internode 180 $B/tests/cuda/switchyard_cuda_internode_test --gtest_brief=1 --gtest_filter='-CudaInternodeErrors.*'
echo "total $((SECONDS - step_start)) s"
