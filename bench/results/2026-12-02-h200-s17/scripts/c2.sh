#!/usr/bin/env bash
# Session 17, call 2: the GPU suites after the one warp copy (every engine's copies changed), the probe
# at the engine's occupancy and with pool memory, and the symmetric dispatch's stamps as threads and as
# processes (heap tensors) at 4096 tokens, fp8.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c2; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
if ldd "$B/tools/bench/switchyard-bench" | grep -q "not found"; then
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
  grep -E "^\[  PASSED|^\[  FAILED|FAILED TEST|ERROR SUMMARY|^[0-9]+ +(read|write)|verdict|^  (dispatch|combine) |stamp|median|rror" "$base/$name.log" | grep -v "^moe-bench: rank" | tail -24
  tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null
}
T=$B/tests/cuda; P=$B/tools/peer_probe/switchyard-peer-probe; SB=$B/tools/bench/switchyard-bench; M=$B/tools/moe_bench/switchyard-moe-bench
step memcheck-sym 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_symmetric_test" --gtest_filter='*Small_R1*'
step memcheck-ll 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_low_latency_test" --gtest_filter='*Small_R1*'
step memcheck-normal 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_normal_engine_test" --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
step memcheck-transport 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_device_transport_test" --gtest_filter='*Small_R1*'
step memcheck-moe 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_moe_layer_test" --gtest_filter='*R1*:*r1*'
step torch-grouped-gemm 100 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --json "$base/torch-grouped-gemm.json"
step moe4096-threads 70 "$M" --tokens 4096 --iters 3 --warmup 1 --json "$base/moe4096-threads.json"
PROBE=(--ranks 8 --span-mib 512 --order random --iters 10)
step probe-threads-smem 30 "$P" "${PROBE[@]}" --ranks-as threads --shared-kib 200 --own-memory pool
E=(--backend cuda --engine symmetric --iters 3 --warmup 1 --ranks 8 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --dtype fp8 --symmetric-heap on --symmetric-combine pull)
step sym8-threads 60 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
step probe-processes-smem 30 "$P" "${PROBE[@]}" --ranks-as processes --shared-kib 200 --own-memory pool
step sym8-processes 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${E[@]}" --ranks-as processes
echo quit | nvidia-cuda-mps-control
step engines-normal 60 "$SB" --backend cuda --engine normal --ranks 8 --tokens 4096 --iters 5 --warmup 1
step engines-ll 45 "$SB" --backend cuda --engine low_latency --ranks 8 --iters 10 --warmup 2
echo "total $((SECONDS - start)) s"
