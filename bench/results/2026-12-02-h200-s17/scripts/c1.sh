#!/usr/bin/env bash
# Session 17, call 1: the peer probe (rows through IPC mappings against the same as threads), then the
# MoE layer at 4096 tokens as processes with and without heap tensors.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c1.tar.gz
if ldd "$B/tools/moe_bench/switchyard-moe-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,temperature.gpu --format=csv,noheader
start=$SECONDS
BUDGET=${BUDGET:-420}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -vE "^moe-bench: rank" "$base/$name.log" | grep -E "^[0-9]|^span|switchyard-peer|verdict|^layer|^  [a-z]|^alone|^weights|^gemm peak|error|rror" | tail -40
  tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null
}
P=$B/tools/peer_probe/switchyard-peer-probe; M=$B/tools/moe_bench/switchyard-moe-bench
step probe-threads 60 "$P" --ranks 8 --ranks-as threads --iters 10 --json "$base/probe-threads.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
step probe-processes 90 "$P" --ranks 8 --ranks-as processes --iters 10 --json "$base/probe-processes.json"
step moe4096-processes-heap 150 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --heap on --json "$base/moe4096-processes-heap.json"
step moe4096-processes 150 "$M" --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --json "$base/moe4096-processes.json"
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - start)) s"
