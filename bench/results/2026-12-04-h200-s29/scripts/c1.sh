#!/usr/bin/env bash
# Written in session 29 for the next GPU call (no GPU was lent in session 29): every GPU suite on main,
# after session 28's shared-header changes and session 29's CUDA code that never ran (the column-major fp8
# scales, the normal engine's heap-resident inputs read in place), then the processes stage of
# scripts/gpu-check.sh, the normal engine's new --heap-tensors process runs included.
# Session 30 (no GPU either) added to what these suites run: the cached dispatch in place without rings
# (cached_gather_kernel: every normal case's cached dispatch without topk_idx, and the process runs' cached
# dispatches), the opening stamps of every normal call (CallsThatDifferAcrossRanksAreRefusedOnEveryRank) and
# the in-place combine's range check. A failure in every normal case at once points at the stamps
# (device/device_barrier.cuh) first.
# Build here first: bash scripts/gpu-local-build.sh, then
#   SWITCHYARD_PACK_ONLY='(normal_engine|low_latency|symmetric|device_transport|internode|hostile_calls|rank_mask|moe_layer|process_ranks|nccl_kernels)_' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry29/c1.tar.xz SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local
# (about 46 MB with xz), and carry it.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry29/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|PASSED|FAILED|MISMATCH|ran |pass|FAIL"
source scripts/device-call.sh
T=$B/tests/cuda
for suite in normal_engine low_latency symmetric device_transport internode low_latency_internode hostile_calls rank_mask moe_layer; do
  step suite-$suite 120 $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
step bench-nccl-kernels 60 $B/tests/bench/switchyard_bench_nccl_kernels_cuda_test --gtest_brief=1
start_mps
for engine in normal low_latency symmetric; do
  for ranks in 2 4 8; do step proc-$engine-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine; done
done
for engine in symmetric normal; do
  for ranks in 2 4 8; do step proc-$engine-heap-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine --heap-tensors on; done
done
for engine in normal low_latency; do
  for ranks in 4 8; do step proc-$engine-np$ranks-2nodes 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --ranks-per-node $((ranks / 2)) --engine $engine; done
done
echo "total $((SECONDS - step_start)) s"
