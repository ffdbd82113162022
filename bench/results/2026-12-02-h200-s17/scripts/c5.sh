#!/usr/bin/env bash
# Session 17, call 5: the probe with this rank's rows scattered over a large own region (as recv_x's
# rows sit at their experts' places), and with the published token's stride, threads against processes.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c5; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c5-logs.tar.gz" c5 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c5.tar.gz
P=$B/tools/peer_probe/switchyard-peer-probe
A=(--ranks 8 --span-mib 64 --owner peers --order random --iters 10 --shared-kib 200 --own-memory pool)
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
  run $mode-in-order --ranks-as $mode
  run $mode-scattered --ranks-as $mode --own-span-mib 1024
  run $mode-scattered-7456 --ranks-as $mode --own-span-mib 1024 --row-bytes 7456
  run $mode-scattered-8rows --ranks-as $mode --own-span-mib 4096 --rows 65536 --row-bytes 14336
done
echo quit | nvidia-cuda-mps-control
