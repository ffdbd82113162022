#!/usr/bin/env bash
# Session 17, call 7: the probe with row addresses from route records a peer wrote into the reader.s buffer (as the engine.s routes), threads against processes.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c7; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c7-logs.tar.gz" c7 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c7.tar.gz
P=$B/tools/peer_probe/switchyard-peer-probe
A=(--ranks 8 --owner peers --order random --iters 10 --shared-kib 200 --own-memory pool)
run() {  # name, args...
  local name=$1; shift
  timeout 40 "$P" "${A[@]}" "$@" --json "$base/$name.json" > "$base/$name.log" 2>&1; echo "== $name rc=$?"
  grep -E "^switchyard|^[0-9]" "$base/$name.log"
}
for mode in threads processes; do
  if [ $mode = processes ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && echo "mps started"
  fi
  run $mode-table --ranks-as $mode --own-span-mib 1024 --span-mib 64 512
  run $mode-peer-written --ranks-as $mode --own-span-mib 1024 --span-mib 64 512 --routes peer-written --direction read
done
echo quit | nvidia-cuda-mps-control
