#!/usr/bin/env bash
# Session 41, call 3: the rest of the GPU suites owed since session 40: the hierarchical engine across nodes,
# the device transport, the host-mapped words.
# Pack: SWITCHYARD_PACK_ONLY='(cuda_internode_test|device_transport_test|mapped_host_words_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry41/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s41c3; CARRY="build/gpu-carry41/c3.tar.xz"; BUDGET=200
STEP_FILTER="rror|FAILED|PASSED|passed|failed"
source scripts/device-call.sh
C=$B/tests/cuda
step internode 120 $C/switchyard_cuda_internode_test --gtest_brief=1
step device_transport 40 $C/switchyard_cuda_device_transport_test --gtest_brief=1
step mapped_host_words 40 $C/switchyard_cuda_mapped_host_words_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
