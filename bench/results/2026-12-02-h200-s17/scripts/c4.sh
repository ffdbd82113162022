#!/usr/bin/env bash
# Session 17, call 4: the probe with spans that their owners rewrite before every copy (as the
# symmetric sources publish just before the pull), threads against processes.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c4; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c4-logs.tar.gz" c4 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c4.tar.gz
P=$B/tools/peer_probe/switchyard-peer-probe
A=(--ranks 8 --span-mib 2 32 512 --direction read --order random sequential --iters 10 --shared-kib 200 --owner-writes)
timeout 60 "$P" "${A[@]}" --ranks-as threads --json "$base/probe-threads-written.json" > "$base/probe-threads-written.log" 2>&1; echo "threads rc=$?"
cat "$base/probe-threads-written.log"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
timeout 90 "$P" "${A[@]}" --ranks-as processes --json "$base/probe-processes-written.json" > "$base/probe-processes-written.log" 2>&1; echo "processes rc=$?"
cat "$base/probe-processes-written.log"
echo quit | nvidia-cuda-mps-control
