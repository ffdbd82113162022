#!/usr/bin/env bash
# Session 41, call 1: (1) the symmetric decode dispatch's fixed steps, each grid sync and the cross-rank
# signal stamped per block (new phases synced, gathered, peers seen; scripts/symmetric_stamps.py's step table),
# at 128 x 8 as processes and as threads, and 4096 x 8 as processes, on whatever card comes (issue 20's is the
# H200); (2) the suites owed since session 40 on this build: symmetric (the kernel's stamps changed), normal,
# the GPU pytest, process ranks, memcheck on the symmetric one-rank cases.
# Pack: SWITCHYARD_PACK_ONLY='(cuda_symmetric_test|normal_engine_test|process_ranks_test|switchyard-bench)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry41/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deps/wheels (pytest).
cd "$(dirname "$0")/../../../.."
CALL=s41c1; CARRY="build/gpu-carry41/c1.tar.xz"; BUDGET=570
STEP_FILTER="rror|FAILED|PASSED|passed|failed|^  (symmetric|low_latency|normal) +[0-9]"
source scripts/device-call.sh
use_carried_python
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^phase/,$p' "$base/$1.summary"; }
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
for round in 1 2; do
  step p128-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --ranks-as processes \
    --json "$base/p128-$round.json"
  summary p128-$round
done
step p128-ll 40 $BENCH --backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 \
  --start timer --ranks-as processes --json "$base/p128-ll.json"
step p4096 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH --backend cuda --engine symmetric --ranks 8 --tokens 4096 \
  --iters 6 --warmup 2 --start timer --symmetric-heap on --symmetric-combine pull --expert-capacity auto \
  --ranks-as processes --json "$base/p4096.json"
summary p4096
for ranks in 2 8; do
  step processes-sym-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-normal-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine normal
# The GPU pytest (scripts/gpu-python-check.sh's tests, from the carried package instead of a pip build here).
step pytest-gpu 150 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_cuda_ranks.py \
  tests/python/test_layout_entry.py tests/python/test_moe.py -p no:cacheprovider
echo quit | nvidia-cuda-mps-control; sleep 2
step t128 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --json "$base/t128.json"
summary t128
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step sanitizer-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
step normal 150 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
