#!/usr/bin/env bash
# Session 17, call 6: low_latency after its LogFMT loads moved to device/warp_copy.cuh's copy_load_v4,
# and the processes stage (one process per rank under MPS) after the one warp copy.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c6; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c6-logs.tar.gz" c6 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c6.tar.gz
if ldd "$B/tests/cuda/switchyard_cuda_process_ranks_test" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
start=$SECONDS
BUDGET=${BUDGET:-200}
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l=$((BUDGET - (SECONDS - start))); [ "$l" -lt 10 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "^\[  PASSED|^\[  FAILED|FAILED TEST|ERROR SUMMARY|verdict|pass|FAIL" "$base/$name.log" | tail -4
  tar -C out -czf "$OUT/c6-logs.tar.gz" c6 2>/dev/null
}
T=$B/tests/cuda; PR=$T/switchyard_cuda_process_ranks_test
step low_latency 40 "$T/switchyard_cuda_low_latency_test" --gtest_brief=1
step memcheck-ll 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_low_latency_test" --gtest_filter='*Small_R1*'
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "mps started"
for engine in normal low_latency symmetric; do
  for ranks in 2 8; do step "processes-$engine-np$ranks" 40 "$PR" --ranks $ranks --engine $engine; done
done
step processes-symmetric-heap-np8 40 "$PR" --ranks 8 --engine symmetric --heap-tensors on
step processes-normal-np8-n2x4 40 "$PR" --ranks 8 --ranks-per-node 4 --engine normal
step processes-low_latency-np8-n2x4 40 "$PR" --ranks 8 --ranks-per-node 4 --engine low_latency
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS - start)) s"
