#!/usr/bin/env bash
# Session 16, call 2: the fp8 pull (TMA whole rows, TMA half rows, warps), the GEMM tiles interleaved,
# the tile unit test with the fp8 WGMMA's precision in its tolerance.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c2; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
if ldd "$B/tools/moe_bench/switchyard-moe-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=$SECONDS
BUDGET=${BUDGET:-560}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "PASSED|FAILED|Failure|ERROR SUMMARY|verdict|^layer|^  [a-z]|^alone|^tiles|^gemm peak|^  dispatch  " "$base/$name.log" | tail -16
  tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null
}
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench; SB=$B/tools/bench/switchyard-bench
step tiles 60 "$T/switchyard_cuda_moe_layer_test" --gtest_brief=1 --gtest_filter='*MoeGroupedGemm*'
ONE=(--backend cuda --engine symmetric --iters 3 --warmup 1 --ranks 1 --tokens 32768 --symmetric-tokens 32768 --expert-capacity auto)
step pull-fp8-warps 110 env SWITCHYARD_SYMMETRIC_STAMPS=1 SWITCHYARD_SYMMETRIC_PULL=warps "$SB" "${ONE[@]}" --dtype fp8
step pull-fp8-whole 110 env SWITCHYARD_SYMMETRIC_STAMPS=1 "$SB" "${ONE[@]}" --dtype fp8
step moe-tiles-one-rank 120 "$M" --ranks 1 --tokens 32768 --iters 5 --warmup 1 --gemm-tiles --json "$base/moe-tiles-one-rank.json"
step moe-warps-one-rank 60 env SWITCHYARD_SYMMETRIC_PULL=warps "$M" --ranks 1 --tokens 32768 --iters 3 --warmup 1 --json "$base/moe-warps-one-rank.json"
step pull-fp8-halves 110 env SWITCHYARD_SYMMETRIC_STAMPS=1 SWITCHYARD_SYMMETRIC_PIECE_BYTES=3584 "$SB" "${ONE[@]}" --dtype fp8
echo "total $((SECONDS - start)) s"
