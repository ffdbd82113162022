#!/usr/bin/env bash
# Session 29, call 1: every GPU suite on main after session 28's shared-header changes (bounded_wait's
# template, ptx / warp_copy wrappers) and this session's combine coordinator (one load per lane and a
# shuffle minimum); the processes stage of scripts/gpu-check.sh; issue 20's side by side with DeepEP V1
# at 8 and 4 processes, now with each library's host time per call (deliverable 6).
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry29/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|verdict|PASSED|FAILED|MISMATCH|target|host cost|^combine|^cached|^layout|ran |pass|FAIL"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
for suite in normal_engine low_latency symmetric device_transport internode low_latency_internode hostile_calls rank_mask moe_layer; do
  step suite-$suite 120 $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
step bench-nccl-kernels 60 $B/tests/bench/switchyard_bench_nccl_kernels_cuda_test --gtest_brief=1
start_mps
for engine in normal low_latency symmetric; do
  for ranks in 2 4 8; do step proc-$engine-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine; done
done
for ranks in 2 4 8; do step proc-symmetric-heap-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on; done
for engine in normal low_latency; do
  for ranks in 4 8; do step proc-$engine-np$ranks-2nodes 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --ranks-per-node $((ranks / 2)) --engine $engine; done
done
echo quit | nvidia-cuda-mps-control; sleep 2
step peer 200 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=100 bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
