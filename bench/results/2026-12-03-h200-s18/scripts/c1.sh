#!/usr/bin/env bash
# Session 18, call 1: does the mapped allocation's size decide the processes gap? The probe at 512 MiB
# spans with buffers 0 / 256 / 1024 / 2048 KiB past the span (processes; threads as the control), then
# the engines as processes before and after the heap is allocated in 2 MiB multiples (same call).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c1.tar.gz
if ldd "$B/switchyard-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,temperature.gpu --format=csv,noheader
start=$SECONDS
BUDGET=${BUDGET:-540}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "^[0-9]|^  (dispatch|combine|layout)|verdict|rror" "$base/$name.log" | tail -12
  tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null
}
P=$B/switchyard-peer-probe
PA=(--ranks 8 --order random --iters 10 --warmup 2 --shared-kib 200 --direction read --owner peers --span-mib 512)
step probe-threads-x256 40 "$P" "${PA[@]}" --ranks-as threads --shared-extra-kib 256 --json "$base/probe-threads-x256.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
for x in 0 256 1024 2048; do
  step probe-processes-x$x 50 "$P" "${PA[@]}" --ranks-as processes --shared-extra-kib $x --json "$base/probe-processes-x$x.json"
done
E=(--backend cuda --engine symmetric --iters 5 --warmup 1 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --symmetric-heap on --symmetric-combine pull --ranks-as processes --ranks 8 --dtype fp8)
for v in before after; do
  step sym-p8-fp8-$v 60 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$B/switchyard-bench-$v" "${E[@]}"
  python3 scripts/symmetric_stamps.py < "$base/sym-p8-fp8-$v.log" | tail -6
done
for v in before after; do
  step normal-p8-$v 70 "$B/switchyard-bench-$v" --backend cuda --engine normal --ranks 8 --tokens 4096 --iters 5 --warmup 1 --ranks-as processes
  step ll-p8-$v 50 "$B/switchyard-bench-$v" --backend cuda --engine low_latency --ranks 8 --iters 20 --warmup 3 --ranks-as processes
done
step sym-p8-bf16-after 60 "$B/switchyard-bench-after" "${E[@]/fp8/bf16}"
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - start)) s"
