#!/usr/bin/env bash
# Session 15, call 2: the hardware fp8 cast in the symmetric publish and the SwiGLU requantisation
# (device/fp8_cast.cuh), 128-byte aligned input tokens; what bounds the fp8 pull (bf16 publish, ncu).
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$PWD/out/c2; B=$PWD/build/g
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry/c2.tar.gz
if ldd "$B/tools/bench/switchyard-bench" | grep -q "not found"; then
  export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
start=$SECONDS
left() { echo $((500 - (SECONDS - start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(left); [ "$l" -lt 20 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "PASSED|FAILED|ERROR SUMMARY|verdict|^layer|dispatch  |alone |swiglu|gemm|combine " "$base/$name.log" | tail -12
}
bench() {  # name, binary, args...
  local name=$1 bin=$2; shift 2
  local l; l=$(left); [ "$l" -lt 30 ] && { echo "== $name skipped (budget)"; return; }
  local limit=100; [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  SWITCHYARD_SYMMETRIC_STAMPS=1 timeout "$limit" "$bin" --backend cuda --engine symmetric --iters 3 --warmup 1 "$@" > "$base/$name.log" 2>&1
  echo "== $name rc=$? ($((SECONDS - t)) s, at $((SECONDS - start)) s)"
  grep -E "^  dispatch  |verdict" "$base/$name.log" | head -3
  python3 scripts/symmetric_stamps.py < "$base/$name.log" | tail -6
}
NEW=$B/tools/bench/switchyard-bench; OLD=$B/bench-unaligned
ONE=(--ranks 1 --tokens 32768 --symmetric-tokens 32768 --expert-capacity auto)
step fp8-cast 60 "$B/tests/cuda/switchyard_cuda_low_latency_test" --gtest_filter='*Fp8Cast*'
step symmetric 150 "$B/tests/cuda/switchyard_cuda_symmetric_test" --gtest_brief=1
bench r1-fp8-aligned "$NEW" "${ONE[@]}" --dtype fp8
bench r1-fp8-unaligned "$OLD" "${ONE[@]}" --dtype fp8
bench r1-bf16-publish "$NEW" "${ONE[@]}" --dtype bf16 --symmetric-dispatch publish
NCU=(ncu --clock-control none -k regex:symmetric_dispatch -s 2 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct)
SMALL=(--backend cuda --engine symmetric --iters 1 --warmup 1 --ranks 1 --tokens 8192 --symmetric-tokens 8192 --expert-capacity auto)
step ncu-fp8 70 "${NCU[@]}" "$NEW" "${SMALL[@]}" --dtype fp8
step ncu-bf16 70 "${NCU[@]}" "$NEW" "${SMALL[@]}" --dtype bf16
step moe-one-rank-32768 110 "$B/tools/moe_bench/switchyard-moe-bench" --ranks 1 --tokens 32768 --iters 3 --json "$base/moe-one-rank-32768.json"
echo "total $((SECONDS - start)) s"
