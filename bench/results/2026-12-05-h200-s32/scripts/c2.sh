#!/usr/bin/env bash
# The second GPU call after session 32. First the GPU Python tests of _torch_ops, whose fresh dispatch (entry
# version 3, DispatchArgs::allocate_outputs) has not run on a GPU, and the one-process host cost of every
# deep_ep call (session 28: layout + dispatch 121.9 us). Then DeepEP V1 beside switchyard (heap inputs, in
# place) at 128 and 4096 tokens, 8 and 4 processes, with the fresh dispatch's counts copied (the default) and
# polled, so that issue 20's 128-token layout + dispatch is compared in one run (session 31: 1.58x at 8 ranks,
# 1.33x at 4).
# Carry: build/gpu-carry32/c2.tar.xz (SWITCHYARD_PACK_ONLY='switchyard-bench' SWITCHYARD_PACK_PYTHON=1
#   SWITCHYARD_PACK_OUT=build/gpu-carry32/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local), .deps/wheels
#   and .deepep-full (git archive 567632dd of DeepEP, git-ignored).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry32/c2.tar.xz"; BUDGET=560
STEP_FILTER="rror|passed|failed|MISMATCH|check |verdict|target|^layout|^cached|^combine"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site SWITCHYARD_EXPECT_TORCH_OPS=1
step pytest-cuda-tensors 120 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_layout_entry.py -p no:cacheprovider
step host-cost 90 python3 tools/peer/deep_ep_host_cost.py --tokens 128 --repeats 150
step peer-heap-copy 170 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap-copy PEER_RANKS="8 4" PEER_TIMEOUT=75 \
  PEER_ARGS=--switchyard-heap-inputs bash scripts/peer-deepep.sh
step peer-heap-poll 150 env SWITCHYARD_NORMAL_COUNTS=poll DEEPEP_SRC=.deepep-full OUT=$base/peer-heap-poll \
  PEER_RANKS="8 4" PEER_TIMEOUT=75 PEER_ARGS=--switchyard-heap-inputs bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
