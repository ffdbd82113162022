#!/usr/bin/env bash
# Session 34's first GPU call: what session 33 left unrun (its c4), plus the normal engine's suite and its
# process tests, since the clock stamps (954d70d) touched the notify, gather and rows kernels. Owed:
#   - the normal suite with the stamps compiled in (off by default; on under SWITCHYARD_NORMAL_PHASES=1), and
#     the normal process tests at 8 processes, heap inputs on and off;
#   - the SwiGLU epilogue after its CUTLASS plumbing moved into cuda/moe/direct_epilogue.cuh (type-only) and the
#     rows-home layer without o (179b32b): the layer's Swiglu and fp8 cases, bitwise;
#   - the GPU Python tests (deep_ep's lazy Stream in _on_stream_of; the fresh-dispatch torch_ops test of c2);
#   - the one-process host cost (predicted: layout + dispatch 112.4 -> ~100-105 us);
#   - the normal dispatch's clock stamps at 128 tokens x 8 processes (scripts/normal_stamps.py);
#   - the rows-home layer against local at 4096 tokens, alternating, two rounds each;
#   - the notify with one barrier (this build) against two (a4521b4's bench, carried as bench-a4521b4.xz):
#     normal at 128 tokens x 8 processes, heap inputs on, alternating, three rounds, with the stamps of each.
# Repack first:
#   SWITCHYARD_PACK_ONLY='(moe_layer_test|normal_engine_test|process_ranks_test|switchyard-moe-bench|switchyard-bench)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry34/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# and carry .deps/wheels and build/gpu-carry34/bench-a4521b4.xz (the old bench, stripped) too.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry34/c1.tar.xz"; BUDGET=580
STEP_FILTER="rror|PASSED|FAILED|passed|failed|^layer|^alone|^  (gemm|combine)|check|verdict"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site SWITCHYARD_EXPECT_TORCH_OPS=1
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench
OLD_BENCH=$B/switchyard-bench-a4521b4
xz -dc build/gpu-carry34/bench-a4521b4.xz > "$OLD_BENCH" && chmod +x "$OLD_BENCH"
step suite-normal 150 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step suite-normal-stamped 150 env SWITCHYARD_NORMAL_PHASES=1 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 \
  --gtest_filter='*R8*:*R4*'
step suite-moe-swiglu-fp8 150 $T/switchyard_cuda_moe_layer_test --gtest_brief=1 --gtest_filter='*Swiglu*:*fp8*'
step pytest-cuda 120 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_layout_entry.py \
  tests/python/test_moe.py -p no:cacheprovider
step host-cost 60 python3 tools/peer/deep_ep_host_cost.py --tokens 128 --repeats 150
start_mps
for heap in on off; do
  step processes-normal-np8-heap-$heap 90 $T/switchyard_cuda_process_ranks_test --ranks 8 --engine normal \
    --heap-tensors $heap
done
# One barrier (new) against two (old), alternating; the stamps' columns 2-3 mean "published, exchanged" in the
# new build and "opened, counted" in the old.
for round in 1 2 3; do
  for build in new old; do
    bench=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bench=$OLD_BENCH
    step notify-$build-r8-t128-$round 45 env SWITCHYARD_NORMAL_PHASES=1 "$bench" --backend cuda --engine normal \
      --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on \
      --json "$base/notify-$build-r8-t128-$round.json"
    python3 scripts/normal_stamps.py < "$base/notify-$build-r8-t128-$round.log" \
      > "$base/notify-$build-r8-t128-$round.summary"
  done
done
grep -h "dispatch\|combine" "$base"/notify-*-r8-t128-*.log | grep -i "median\|us" | head -40
for round in 1 2; do
  for output in local home; do
    step moe4096-threads-$output-$round 75 "$M" --tokens 4096 --iters 3 --warmup 1 --expert-output $output \
      --json "$base/moe4096-threads-$output-$round.json"
  done
done
echo "total $((SECONDS - step_start)) s"
