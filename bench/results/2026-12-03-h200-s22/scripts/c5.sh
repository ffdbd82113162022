#!/usr/bin/env bash
# Session 22, call 5: (1) the symmetric engine at 128 tokens, 8 threads, before / after, three rounds
# interleaved (call 2's one run each showed the dispatch's graph replay 172.8 -> 218.2 us, its plain call
# 226.4 -> 230.0: noise or not); (2) the MoE layer at 4096 tokens as 8 processes with heap tensors, after,
# beside torch's two fp8 grouped GEMMs in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c5; B=$PWD/build/g5
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/c5-logs.tar.gz" c5 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry22/c2.tar.gz
BUDGET=${BUDGET:-330}; STEP_TAR=c5
STEP_FILTER="^layer|^alone|^  (dispatch|combine)|verdict|rror|torch|tokens"
source scripts/device-step.sh
S128=(--backend cuda --engine symmetric --iters 50 --warmup 5 --ranks 8 --symmetric-heap on --symmetric-combine pull --ranks-as threads)
for round in 1 2 3; do
  for v in old new; do step sym128-$v-r$round 30 "$B/$v/switchyard-bench" "${S128[@]}" --json "$base/sym128-$v-r$round.json"; done
done
step torch-grouped-gemm 40 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
step layer4096-processes-new 100 "$B/new/switchyard-moe-bench" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes \
  --heap on --json "$base/layer4096-processes-new.json"
echo "total $((SECONDS - step_start)) s"
