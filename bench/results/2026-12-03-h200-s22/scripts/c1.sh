#!/usr/bin/env bash
# Session 22, call 1: what bounds the MoE layer's memory-bound phases at 4096 tokens (session 21's plan,
# item 1): Nsight Compute on the symmetric fp8 pull dispatch and the pull combine, one rank with all 256
# experts (32768 tokens: the same rows as 8 ranks of 4096), with per-instruction stall samples; then the
# same run unprofiled for the phase times.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c1; B=$PWD/build/g1
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry22/c1.tar.gz
BUDGET=${BUDGET:-300}; STEP_TAR=c1
STEP_FILTER="^layer|^alone|^  (dispatch|gemm|swiglu|combine)|Throughput|Duration|rror|Occupancy|Registers|Block Limit|Waves"
source scripts/device-step.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
M=$B/tools/moe_bench/switchyard-moe-bench
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
  --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy
  --section SourceCounters --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct)
step ncu-phases 150 ncu --clock-control none --kernel-name regex:'symmetric_(dispatch|pull_combine)_kernel' \
  --launch-count 2 "${SECTIONS[@]}" -o "$base/phases" "$M" --ranks 1 --tokens 32768 --warmup 0 --iters 1 --check-tokens 0
ncu --import "$base/phases.ncu-rep" --page details > "$base/phases-details.txt" 2>&1
ncu --import "$base/phases.ncu-rep" --page source --csv --print-source sass > "$base/phases-sass.csv" 2>&1
gzip -f "$base/phases-sass.csv"
step one-rank 60 "$M" --ranks 1 --tokens 32768 --iters 3 --warmup 1 --json "$base/one-rank.json"
echo "total $((SECONDS - step_start)) s"
