#!/usr/bin/env bash
# Session 21, call 4: (1) where the cluster-pair epilogue's GEMM 1 time goes: one rank, all 256 experts,
# GEMM 1 in m128 (separate SwiGLU kernel), in m128_cluster2n (the same clusters and multicast, fp32 h and the
# separate kernel) and with the epilogue, in one call; (2) owed from session 20 (the engine interface,
# ac4787a, in this build): a rank killed mid-call for every engine at 2/4/8 processes, and every engine at
# 2 and 4 processes (8 passed in session 20's call 5).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c4; B=$PWD/build/g4
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/c4-logs.tar.gz" c4 2>/dev/null; true' EXIT
for t in c2 c4; do tar -C "$B" -xzf build/gpu-carry21/$t.tar.gz; done
BUDGET=${BUDGET:-400}; STEP_TAR=c4
STEP_FILTER="^layer|^alone|^  (dispatch|gemm 1|swiglu)|PASSED|FAILED|rror|timed out|survivor"
source scripts/device-step.sh
M=$B/tools/moe_bench/switchyard-moe-bench
R1=(--ranks 1 --tokens 32768 --iters 3 --warmup 1)
step one-rank-m128 45 "$M" "${R1[@]}" --json "$base/one-rank-m128.json"
step one-rank-cluster2n 45 env SWITCHYARD_MOE_GEMM_TILES=m128_cluster2n,m128 "$M" "${R1[@]}" \
  --json "$base/one-rank-cluster2n.json"
step one-rank-epilogue 45 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" "${R1[@]}" --gate-up interleaved \
  --json "$base/one-rank-epilogue.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
K=$B/tests/cuda/switchyard_cuda_killed_rank_test; P=$B/tests/cuda/switchyard_cuda_process_ranks_test
for engine in normal low_latency symmetric; do
  for ranks in 2 4 8; do step killed-$engine-np$ranks 60 "$K" --ranks $ranks --engine $engine; done
done
for engine in normal low_latency symmetric; do
  for ranks in 2 4; do step processes-$engine-np$ranks 40 "$P" --ranks $ranks --engine $engine; done
done
for ranks in 2 4; do step processes-symmetric-heap-np$ranks 40 "$P" --ranks $ranks --engine symmetric --heap-tensors on; done
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - step_start)) s"
