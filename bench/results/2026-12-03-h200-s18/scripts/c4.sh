#!/usr/bin/env bash
# Session 18, call 4: where the decode-size time goes (issue 20, deliverable 5: <= 80 us per phase):
# the symmetric dispatch's stamps at 128 tokens as 8 threads and as 8 processes (heap input, pull
# combine named, as a caller with heap tensors does), and the MoE layer at 4096 tokens as processes
# beside torch's two fp8 grouped GEMMs in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c4; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c4-logs.tar.gz" c4 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
BUDGET=${BUDGET:-270}; STEP_TAR=c4
STEP_FILTER="^  (dispatch|combine)|verdict|^layer|^alone|host:|torch|TFLOPS|rror"
source scripts/device-step.sh
SB=$B/switchyard-bench; M=$B/switchyard-moe-bench
S128=(--backend cuda --engine symmetric --iters 50 --warmup 5 --ranks 8 --symmetric-heap on --symmetric-combine pull)
step sym128-threads 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${S128[@]}" --ranks-as threads
python3 scripts/symmetric_stamps.py < "$base/sym128-threads.log" | tail -7
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
step sym128-processes 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${S128[@]}" --ranks-as processes
python3 scripts/symmetric_stamps.py < "$base/sym128-processes.log" | tail -7
step moe4096-processes 100 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --heap on --json "$base/moe4096-processes.json"
echo quit | nvidia-cuda-mps-control
step torch-grouped-gemm 100 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --json "$base/torch-grouped-gemm.json"
echo "total $((SECONDS - step_start)) s"
