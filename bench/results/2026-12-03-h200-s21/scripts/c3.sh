#!/usr/bin/env bash
# Session 21, call 3: why GEMM 1 with the cluster-pair SwiGLU epilogue is ~30 % slower (call 2): Nsight
# Compute on it (one rank, all 256 experts, 32768 tokens) with warp states and per-instruction stall
# samples; racecheck on the epilogue test with every hazard printed (are any in the exchange, or all in
# CUTLASS's scale copies?) against the separate fp8 GEMM's tile test as the baseline; synccheck.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c3; B=$PWD/build/g3
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c3-logs.tar.gz" c3 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry21/c2.tar.gz
BUDGET=${BUDGET:-300}; STEP_TAR=c3
STEP_FILTER="Duration|SM Frequency|Throughput|PASSED|FAILED|SUMMARY|rror"
source scripts/device-step.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test; M=$B/tools/moe_bench/switchyard-moe-bench
step ncu-epilogue 120 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on ncu --clock-control none --kernel-name regex:device_kernel \
  --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats \
  -o "$base/epilogue" "$M" --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0 --gate-up interleaved
ncu --import "$base/epilogue.ncu-rep" --page details > "$base/epilogue-details.txt" 2>&1
ncu --import "$base/epilogue.ncu-rep" --page source --print-source sass --csv > "$base/epilogue-sass.csv" 2>&1
gzip -f "$base/epilogue-sass.csv"
step racecheck-epilogue 60 compute-sanitizer --tool racecheck --print-limit 1000000 "$T" \
  --gtest_filter='Clamps/MoeSwigluEpilogue.*/no_clamp'
grep -c "Race reported" "$base/racecheck-epilogue.log"
grep -E "swiglu_epilogue|ptx.cuh" "$base/racecheck-epilogue.log" | sort | uniq -c | head -20
step racecheck-tiles 60 compute-sanitizer --tool racecheck --print-limit 1000000 "$T" \
  --gtest_filter='Kinds/MoeGroupedGemmTiles.*/fp8_to_f32'
grep -c "Race reported" "$base/racecheck-tiles.log"
step synccheck-epilogue 60 compute-sanitizer --tool synccheck "$T" --gtest_filter='Clamps/MoeSwigluEpilogue.*/no_clamp'
echo "total $((SECONDS - step_start)) s"
