#!/usr/bin/env bash
# Session 18, call 3: the GPU suites after the heap's 2 MiB allocation (05f068e): the processes stage of
# gpu-check (normal, low_latency, symmetric at 2/4/8 processes, heap tensors, 2 x N nodes, the probe on
# and off the 2 MiB pages, a killed rank), then the symmetric and hostile-calls suites as threads, and
# compute-sanitizer memcheck on their one-rank cases.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/c3"
SWITCHYARD_GPU_PREBUILT=build/gpu-carry/c3.tar.gz SWITCHYARD_GPU_BUILD=build/g SWITCHYARD_GPU_STAGES="processes" \
  OUT="$OUT/c3" timeout 420 bash scripts/gpu-check.sh 2>&1 | grep -E "^== " 
T=build/g/tests/cuda
for suite in symmetric hostile_calls; do
  timeout 150 "$T/switchyard_cuda_${suite}_test" --gtest_brief=1 > "$OUT/c3/tests-$suite.log" 2>&1
  echo "== tests $suite rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/c3/tests-$suite.log" | tr '\n' ' ')"
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 "$T/switchyard_cuda_symmetric_test" \
  --gtest_filter='*Small_R1*' > "$OUT/c3/memcheck-symmetric.log" 2>&1
echo "== memcheck symmetric rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/c3/memcheck-symmetric.log")"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$T/switchyard_cuda_hostile_calls_test" \
  --gtest_filter='CudaHeapHandles*' > "$OUT/c3/memcheck-hostile.log" 2>&1
echo "== memcheck hostile rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/c3/memcheck-hostile.log")"
"$T/switchyard_device_heap_size_test" --gtest_brief=1 2>&1 | tail -1
tar -C "$OUT" -czf "$OUT/c3-logs.tar.gz" c3
