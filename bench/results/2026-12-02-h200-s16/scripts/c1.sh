#!/usr/bin/env bash
# Session 16, call 1: verification owed from session 15 (suites after the cherry-picked expert-major
# outputs, the normal/internode suites, moe_layer + memcheck), the new GEMM tiles (bitwise test, sweep),
# the fair "alone", and the pull piece experiment.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c1.tar.gz
if ldd "$B/tools/moe_bench/switchyard-moe-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=$SECONDS
BUDGET=${BUDGET:-570}
left() { echo $((BUDGET - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "PASSED|FAILED|ERROR SUMMARY|verdict|^layer|^  [a-z]|^alone|^tiles|^weights|^gemm peak|^  dispatch  |^  combine  " "$base/$name.log" | tail -16
  tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null
}
T=$B/tests/cuda; M=$B/tools/moe_bench/switchyard-moe-bench; SB=$B/tools/bench/switchyard-bench
step tiles 60 "$T/switchyard_cuda_moe_layer_test" --gtest_brief=1 --gtest_filter='*MoeGroupedGemm*'
step moe-tiles-one-rank 150 "$M" --ranks 1 --tokens 32768 --iters 3 --warmup 1 --gemm-tiles --json "$base/moe-tiles-one-rank.json"
ONE=(--backend cuda --engine symmetric --iters 3 --warmup 1 --ranks 1 --tokens 32768 --symmetric-tokens 32768 --expert-capacity auto)
step pull-fp8-whole 40 "$SB" "${ONE[@]}" --dtype fp8
step pull-fp8-halves 40 env SWITCHYARD_SYMMETRIC_PIECE_BYTES=3584 "$SB" "${ONE[@]}" --dtype fp8
step pull-fp8-warps 40 env SWITCHYARD_SYMMETRIC_PULL=warps "$SB" "${ONE[@]}" --dtype fp8
step pull-bf16-whole 40 "$SB" "${ONE[@]}" --dtype bf16 --symmetric-dispatch publish
step pull-bf16-halves 40 env SWITCHYARD_SYMMETRIC_PIECE_BYTES=7168 "$SB" "${ONE[@]}" --dtype bf16 --symmetric-dispatch publish
step pull-bf16-warps 40 env SWITCHYARD_SYMMETRIC_PULL=warps "$SB" "${ONE[@]}" --dtype bf16 --symmetric-dispatch publish
step pull-zc-bf16-warps 40 env SWITCHYARD_SYMMETRIC_PULL=warps "$SB" "${ONE[@]}" --dtype bf16
step symmetric-warps 150 env SWITCHYARD_SYMMETRIC_PULL=warps "$T/switchyard_cuda_symmetric_test" --gtest_brief=1
step symmetric 150 "$T/switchyard_cuda_symmetric_test" --gtest_brief=1
step low_latency 90 "$T/switchyard_cuda_low_latency_test" --gtest_brief=1
step moe_layer 120 "$T/switchyard_cuda_moe_layer_test" --gtest_brief=1
step normal_engine 60 "$T/switchyard_cuda_normal_engine_test" --gtest_brief=1
step internode 60 "$T/switchyard_cuda_internode_test" --gtest_brief=1
step memcheck-sym 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_symmetric_test" --gtest_filter='*Small_R1*fp8*:*PrecastFp8*r1_*'
step memcheck-moe 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/switchyard_cuda_moe_layer_test" --gtest_filter='*R1*:*r1*:*MoeGroupedGemmTiles*'
echo "total $((SECONDS - start)) s"
