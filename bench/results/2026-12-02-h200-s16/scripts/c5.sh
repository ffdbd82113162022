#!/usr/bin/env bash
# Session 16, call 5: the layer picking its GEMM tile per call (expected rows per expert).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$PWD/build/g; mkdir -p "$B" "$OUT/c5"
tar -C "$B" -xzf build/gpu-carry/c5.tar.gz
export LD_LIBRARY_PATH="$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")"
M=$B/tools/moe_bench/switchyard-moe-bench
timeout 75 "$B/tests/cuda/switchyard_cuda_moe_layer_test" --gtest_brief=1 > "$OUT/c5/moe_layer.log" 2>&1; echo "== moe_layer rc=$?"
grep -E "PASSED|FAILED|Failure" "$OUT/c5/moe_layer.log" | tail -8
timeout 50 "$M" --tokens 128 --iters 10 --warmup 2 --json "$OUT/c5/moe128.json" > "$OUT/c5/moe128.log" 2>&1; echo "== moe128 rc=$?"
grep -E "^layer|^  [a-z]|^weights|^alone|verdict" "$OUT/c5/moe128.log"
timeout 55 "$M" --tokens 4096 --iters 3 --warmup 1 --json "$OUT/c5/moe4096.json" > "$OUT/c5/moe4096.log" 2>&1; echo "== moe4096 rc=$?"
grep -E "^layer|^  [a-z]|^alone|verdict" "$OUT/c5/moe4096.log"
