#!/usr/bin/env bash
# The next GPU call after session 33 (its budget ran out before this ran). Owed:
#   - the SwiGLU epilogue after its CUTLASS plumbing moved into cuda/moe/direct_epilogue.cuh (shared with the
#     rows-home epilogue; a type-only change): its tests and the layer's fp8 cases, bitwise (they also run the
#     rows-home layer since it allocates no o and plans its combine without an x, 179b32b);
#   - the GPU Python tests: deep_ep's handle scope now keeps torch's stream identity and makes the Stream only
#     when entered (_on_stream_of), and the fresh-dispatch torch_ops test fixed in c2;
#   - the one-process host cost (predicted: layout + dispatch 112.4 -> ~100-105 us);
#   - the rows-home layer against local at 4096 tokens, alternating, two rounds each (c3 had one: +8.8 %);
#   - the fresh normal dispatch's clock stamps (SWITCHYARD_NORMAL_PHASES=1 now also stamps %globaltimer in the
#     notify and the rows kernel; scripts/normal_stamps.py): at 128 tokens x 8 processes, how far apart the
#     ranks' notifies start and what of the notify step is the wait for the last one.
# Repack first:
#   SWITCHYARD_PACK_ONLY='(moe_layer_test|switchyard-moe-bench|switchyard-bench)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry33/c4.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# and carry .deps/wheels too (pytest).
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry33/c4.tar.xz"; BUDGET=540
STEP_FILTER="rror|PASSED|FAILED|passed|failed|^layer|^alone|^  (gemm|combine)|check|verdict"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site SWITCHYARD_EXPECT_TORCH_OPS=1
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench
step suite-moe-swiglu-fp8 150 $T/switchyard_cuda_moe_layer_test --gtest_brief=1 --gtest_filter='*Swiglu*:*fp8*'
step pytest-cuda 120 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_layout_entry.py \
  tests/python/test_moe.py -p no:cacheprovider
step host-cost 60 python3 tools/peer/deep_ep_host_cost.py --tokens 128 --repeats 150
start_mps
step stamps-normal-r8-t128 60 env SWITCHYARD_NORMAL_PHASES=1 $B/tools/bench/switchyard-bench --backend cuda \
  --engine normal --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on \
  --json "$base/stamps-normal-r8-t128.json"
python3 scripts/normal_stamps.py < "$base/stamps-normal-r8-t128.log" | tee "$base/stamps-normal-r8-t128.summary"
for round in 1 2; do
  for output in local home; do
    step moe4096-threads-$output-$round 75 "$M" --tokens 4096 --iters 3 --warmup 1 --expert-output $output \
      --json "$base/moe4096-threads-$output-$round.json"
  done
done
echo "total $((SECONDS - step_start)) s"
