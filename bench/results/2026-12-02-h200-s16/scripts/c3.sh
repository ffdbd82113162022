#!/usr/bin/env bash
# Session 16, call 3: the MoE layer at 128 tokens (tiles, threads and processes), 4096 as processes,
# and the 8-rank fp8 dispatch's stamps with both pulls.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c3; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
if ldd "$B/tools/moe_bench/switchyard-moe-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=$SECONDS
BUDGET=${BUDGET:-400}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "PASSED|FAILED|verdict|^layer|^  [a-z]|^alone|^tiles|^weights|^  dispatch  |^  combine  " "$base/$name.log" | tail -16
  tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null
}
M=$B/tools/moe_bench/switchyard-moe-bench; SB=$B/tools/bench/switchyard-bench
step moe128-tiles 60 "$M" --tokens 128 --iters 10 --warmup 2 --gemm-tiles --json "$base/moe128-tiles.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
step moe128-processes 90 "$M" --tokens 128 --iters 10 --warmup 2 --ranks-as processes --json "$base/moe128-processes.json"
step moe4096-processes 150 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --json "$base/moe4096-processes.json"
echo quit | nvidia-cuda-mps-control
E=(--backend cuda --engine symmetric --iters 3 --warmup 1 --ranks 8 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --dtype fp8)
step sym8-fp8-tma 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}"
step sym8-fp8-warps 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 SWITCHYARD_SYMMETRIC_PULL=warps "$SB" "${E[@]}"
echo "total $((SECONDS - start)) s"
