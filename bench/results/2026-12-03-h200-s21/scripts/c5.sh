#!/usr/bin/env bash
# Session 21, call 5: (1) owed from session 20: normal's dispatch at 128 tokens before (6290aaf) and after
# (ac4787a, the engine interface) in 5 interleaved rounds each, 8 threads, to tell the +2 % median of
# session 20's call 6 from noise; (2) issue 21 at 128 tokens: the layer as 8 threads and as 8 processes
# (heap tensors) beside torch's two fp8 grouped GEMMs in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c5; B=$PWD/build/g5
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/c5-logs.tar.gz" c5 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry5/t2.tar.gz; tar -C "$B" -xzf build/gpu-carry21/c2.tar.gz
BUDGET=${BUDGET:-330}; STEP_TAR=c5
STEP_FILTER="^  (dispatch|combine)|^layer|^weights|^alone|torch|tokens|verdict|rror"
source scripts/device-step.sh
SB=$B/tools/bench/switchyard-bench; M=$B/tools/moe_bench/switchyard-moe-bench
for round in 1 2 3 4 5; do
  for build in old new; do
    bin=$SB; [ $build = old ] && bin=$SB-old
    step normal128-$build-$round 30 "$bin" --backend cuda --engine normal --ranks 8 --tokens 128 --iters 30 \
      --json "$base/normal128-$build-$round.json"
  done
done
step layer128-threads 45 "$M" --tokens 128 --iters 10 --warmup 2 --json "$base/layer128-threads.json"
step torch-128 40 python3 tools/peer/torch_grouped_gemm.py --tokens 128 --recipes fp8 --json "$base/torch128.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
step layer128-processes 60 "$M" --tokens 128 --iters 10 --warmup 2 --ranks-as processes --heap on \
  --json "$base/layer128-processes.json"
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - step_start)) s"
