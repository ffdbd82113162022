#!/usr/bin/env bash
# Session 22, call 2: the pull combine by token runs (two chunks a step, the slots spread once a run) and
# the fp8 pull copier in one pass a row (depth 14, scales loaded with the row), before / after in one call:
# Nsight Compute on the two kernels (one rank, 32768 tokens); the symmetric engine's bench at 4096 (fp8
# and bf16, heap tensors, pull combine) and 128 tokens, 8 threads; the MoE layer at one rank and at 4096
# tokens x 8 threads, rounds interleaved; torch's two fp8 grouped GEMMs in the same call. Every bench
# iteration is checked (bitwise for the engine, against the reference for the layer).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c2; B=$PWD/build/g2
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry22/c2.tar.gz
BUDGET=${BUDGET:-560}; STEP_TAR=c2
STEP_FILTER="^layer|^alone|^  (dispatch|gemm 1|swiglu|combine)|verdict|rror|Duration|DRAM Throughput|torch"
source scripts/device-step.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats
  --section LaunchStats --section Occupancy --section SourceCounters
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct)
step ncu-new 60 ncu --clock-control none --kernel-name regex:'symmetric_(dispatch|pull_combine)_kernel' \
  --launch-count 2 "${SECTIONS[@]}" -o "$base/phases-new" "$B/new/switchyard-moe-bench" --ranks 1 --tokens 32768 \
  --warmup 0 --iters 1 --check-tokens 0
ncu --import "$base/phases-new.ncu-rep" --page details > "$base/phases-new-details.txt" 2>&1
ncu --import "$base/phases-new.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$base/phases-new-sass.csv.gz"
R1=(--ranks 1 --tokens 32768 --iters 3 --warmup 1)
for v in old new; do step one-rank-$v 45 "$B/$v/switchyard-moe-bench" "${R1[@]}" --json "$base/one-rank-$v.json"; done
S4=(--backend cuda --engine symmetric --iters 5 --warmup 1 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto
  --symmetric-heap on --symmetric-combine pull --ranks 8 --ranks-as threads)
S128=(--backend cuda --engine symmetric --iters 50 --warmup 5 --ranks 8 --symmetric-heap on --symmetric-combine pull --ranks-as threads)
for v in old new; do
  step sym4096-fp8-$v 60 "$B/$v/switchyard-bench" "${S4[@]}" --dtype fp8 --json "$base/sym4096-fp8-$v.json"
  step sym4096-bf16-$v 60 "$B/$v/switchyard-bench" "${S4[@]}" --dtype bf16 --json "$base/sym4096-bf16-$v.json"
  step sym128-$v 40 "$B/$v/switchyard-bench" "${S128[@]}" --json "$base/sym128-$v.json"
done
for round in 1 2; do
  for v in old new; do
    step layer4096-$v-r$round 75 "$B/$v/switchyard-moe-bench" --tokens 4096 --iters 3 --warmup 1 \
      --json "$base/layer4096-$v-r$round.json"
  done
done
step torch-grouped-gemm 80 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --json "$base/torch.json"
echo "total $((SECONDS - step_start)) s"
