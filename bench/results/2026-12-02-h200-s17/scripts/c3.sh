#!/usr/bin/env bash
# Session 17, call 3: the symmetric dispatch's phase stamps as processes (one write per stamp line now),
# fp8 by warps and by TMA, 4 and 8 ranks, and bf16 zero-copy.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c3; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c3.tar.gz
if ldd "$B/tools/bench/switchyard-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
start=$SECONDS
BUDGET=${BUDGET:-240}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  python3 scripts/symmetric_stamps.py < "$base/$name.log" | tail -9
  grep -E "^  (dispatch|combine) |verdict" "$base/$name.log"
  tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null
}
SB=$B/tools/bench/switchyard-bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
E=(--backend cuda --engine symmetric --iters 3 --warmup 1 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --symmetric-heap on --symmetric-combine pull --ranks-as processes)
step p8-fp8-warps 60 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}" --ranks 8 --dtype fp8
step p8-fp8-tma 60 env SWITCHYARD_SYMMETRIC_STAMPS=1 SWITCHYARD_SYMMETRIC_PULL=tma "$SB" "${E[@]}" --ranks 8 --dtype fp8
step p4-fp8-warps 50 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}" --ranks 4 --dtype fp8
step p8-bf16 60 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}" --ranks 8 --dtype bf16
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - start)) s"
