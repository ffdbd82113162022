#!/usr/bin/env bash
# Session 39, call 1: the bf16 push of the symmetric dispatch (cuda/symmetric/push.cuh), correctness first.
#   1. the symmetric suite as it runs by default (bf16 rows now pushed where every rank is a thread on one GPU,
#      into a bf16 heap receive area too), then the new tests with the pulls forced, and the one-rank memcheck;
#   2. the suites whose symmetric calls now push: rank_mask, hostile, MoE (its bf16 recipe as threads);
#      device_transport (its error block now a MappedHostWords);
#   3. process ranks np8 symmetric, plain and with heap tensors.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|rank_mask_test|hostile_calls_test|moe_layer_test|device_transport_test|process_ranks_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry39/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry39/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|tests ran|passed|SKIPPED"
source scripts/device-call.sh
C=$B/tests/cuda
step symmetric 220 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step symmetric-tma 60 env SWITCHYARD_SYMMETRIC_PULL=tma $C/switchyard_cuda_symmetric_test --gtest_brief=1 \
  --gtest_filter='*Bf16Dispatches*:*HeapReceive*'
step sanitizer-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step device_transport 60 $C/switchyard_cuda_device_transport_test --gtest_brief=1
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
start_mps
step processes-symmetric-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric
step processes-symmetric-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
echo "total $((SECONDS - step_start)) s"
