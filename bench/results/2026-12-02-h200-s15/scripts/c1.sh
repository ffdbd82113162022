#!/usr/bin/env bash
# Session 15, call 1: the symmetric store-read lag (stores in flight per block) and the fp8 row+scales
# single load: suite, memcheck, a lag sweep at one rank (32768 tokens, fp8 and bf16), 8 ranks fp8, the
# MoE layer at one rank; then the normal and internode suites (session 14's dispatch_outputs refactor).
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c1; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c1-logs.tar.gz" c1 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c1.tar.gz
if ldd "$B/tools/bench/switchyard-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
start=$SECONDS
left() { echo $((570 - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 20 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "PASSED|FAILED|ERROR SUMMARY|verdict|^layer|dispatch  |alone " "$base/$name.log" | tail -8
}
bench() {  # name, binary, lag ('' = default), args...
  local name=$1 bin=$2 lag=$3; shift 3
  local l; l=$(left); [ "$l" -lt 30 ] && { echo "== $name skipped (budget)"; return; }
  local limit=110; [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  SWITCHYARD_SYMMETRIC_STORE_READ_LAG=$lag SWITCHYARD_SYMMETRIC_STAMPS=1 timeout "$limit" "$bin" --backend cuda --engine symmetric --iters 4 --warmup 1 "$@" > "$base/$name.log" 2>&1
  echo "== $name rc=$? ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "^\| *symmetric|verdict" "$base/$name.log" | head -6
  python3 scripts/symmetric_stamps.py < "$base/$name.log" | tail -6
}
NEW=$B/tools/bench/switchyard-bench; OLD=$B/bench-lag-only
ONE=(--ranks 1 --tokens 32768 --symmetric-tokens 32768 --expert-capacity auto)
step symmetric 150 "$B/tests/cuda/switchyard_cuda_symmetric_test" --gtest_brief=1
bench r1-fp8-old-lag2 "$OLD" 2 "${ONE[@]}" --dtype fp8
bench r1-fp8-lag2 "$NEW" 2 "${ONE[@]}" --dtype fp8
bench r1-fp8-default "$NEW" '' "${ONE[@]}" --dtype fp8
bench r1-fp8-lag6 "$NEW" 6 "${ONE[@]}" --dtype fp8
bench r1-bf16-lag2 "$NEW" 2 "${ONE[@]}" --dtype bf16
bench r1-bf16-default "$NEW" '' "${ONE[@]}" --dtype bf16
bench r8-fp8-default "$NEW" '' --ranks 8 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto --dtype fp8
step moe-one-rank-32768 120 "$B/tools/moe_bench/switchyard-moe-bench" --ranks 1 --tokens 32768 --iters 5 --json "$base/moe-one-rank-32768.json"
step memcheck-sym 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/cuda/switchyard_cuda_symmetric_test" --gtest_filter='*Small_R1*:*PrecastFp8*r1_*'
step normal_engine 120 "$B/tests/cuda/switchyard_cuda_normal_engine_test" --gtest_brief=1
step internode 150 "$B/tests/cuda/switchyard_cuda_internode_test" --gtest_brief=1
echo "total $((SECONDS - start)) s"
