#!/usr/bin/env bash
# Session 41, call 2: the suites c1 did not carry, on the same build (GPU-scope signals by default): normal
# (owed since session 40), low_latency across nodes (its send kernels' fences), the MoE layer (symmetric
# dispatch and pull combine), hostile calls, and the GPU pytest from the carried package.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|low_latency_internode_test|moe_layer_test|hostile_calls_test)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry41/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deps/wheels.
cd "$(dirname "$0")/../../../.."
CALL=s41c2; CARRY="build/gpu-carry41/c2.tar.xz"; BUDGET=500
STEP_FILTER="rror|FAILED|PASSED|passed|failed"
source scripts/device-call.sh
use_carried_python
C=$B/tests/cuda
step normal 150 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step low_latency_internode 60 $C/switchyard_cuda_low_latency_internode_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
start_mps
step pytest-gpu 150 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_cuda_ranks.py \
  tests/python/test_layout_entry.py tests/python/test_moe.py -p no:cacheprovider
echo "total $((SECONDS - step_start)) s"
