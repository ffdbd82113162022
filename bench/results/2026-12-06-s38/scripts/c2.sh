#!/usr/bin/env bash
# Session 38, call 2: the rest of the whole-suite debt since session 36 (after c1's engine suites): the MoE
# suite and its sanitizer case, the GPU Python tests (the packed module: torch tensors, ranks as processes,
# the timer hold's marks), the MoE layer's bench at 128 and 4096 tokens (threads and processes) and issue 21's
# layer against torch's two fp8 GEMMs (three rounds, one protocol). Pack:
#   SWITCHYARD_PACK_ONLY='(moe_layer_test|switchyard-moe-bench)' SWITCHYARD_PACK_PYTHON=1 \
#     SWITCHYARD_PACK_OUT=build/gpu-carry38b/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry38b/c2.tar.xz"; BUDGET=520
STEP_FILTER="rror|PASSED|FAILED|passed|failed|^layer|^alone|^  (gemm|combine)|check|verdict|round"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site SWITCHYARD_EXPECT_TORCH_OPS=1
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench
step moe 200 $T/switchyard_cuda_moe_layer_test --gtest_brief=1
step sanitizer-moe 120 compute-sanitizer --tool memcheck --error-exitcode 1 $T/switchyard_cuda_moe_layer_test \
  --gtest_filter='*Small_R1*'
start_mps
step pytest-cuda 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_tensors.py \
  tests/python/test_cuda_ranks.py tests/python/test_moe.py::test_torch_tensors_in_and_out \
  tests/python/test_moe.py::test_torch_precast_fp8_x
for tokens in 128; do
  step moe-processes-heap-$tokens 120 "$M" --tokens $tokens --ranks-as processes --heap on --check-tokens 0 \
    --json "$base/moe-processes-heap-$tokens.json"
done
echo quit | nvidia-cuda-mps-control; sleep 2
step moe-threads-128 120 "$M" --tokens 128 --json "$base/moe-threads-128.json"
step layer-vs-torch 200 python3 tools/peer/layer_vs_torch.py --moe-bench "$M" --tokens 4096 --rounds 2 \
  --json "$base/layer-vs-torch.json"
echo "total $((SECONDS - step_start)) s"
