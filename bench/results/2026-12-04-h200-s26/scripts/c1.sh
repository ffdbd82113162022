#!/usr/bin/env bash
# Session 26, call 1: GEMM 2 with its epilogue storing from registers (tile m128_direct), the push's and the
# pull combine's shared rows_before_this_rank, the heap receive area's public views (process test of the push).
# Suites: symmetric (push by default, and forced), the MoE tile and layer tests, the process-per-rank symmetric
# test with heap tensors (the push across processes). Then: HBM write-only and copy bandwidth; the push
# dispatch's phase stamps at 8 x 4096; the fp8 GEMMs in every tile at one rank; the layer at 4096 x 8 threads
# with GEMM 2 in m128 and in m128_direct, alternating with torch's two fp8 GEMMs.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry26/c1.tar.gz"; BUDGET=520
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|TB/s|tile|m128|m64|stamp|barrier|released|drained"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
SB=$B/tools/bench/switchyard-bench
step symmetric 150 ${T}_symmetric_test --gtest_brief=1
step moe-tiles 90 ${T}_moe_layer_test --gtest_brief=1 --gtest_filter='*MoeGroupedGemm*:*MoeSwigluEpilogue*'
step hbm 30 python3 -c "
import torch
n = 2 << 30
a = torch.empty(n, dtype=torch.uint8, device='cuda'); b = torch.empty_like(a)
s, e = torch.cuda.Event(True), torch.cuda.Event(True)
def t(f):
    f(); torch.cuda.synchronize(); ts = []
    for _ in range(10):
        s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return sorted(ts)[5] / 1e3
w = t(lambda: a.fill_(7)); c = t(lambda: b.copy_(a)); r = t(lambda: a.sum(dtype=torch.int64))
print(f'write-only {n / w / 1e12:.2f} TB/s; copy (read + write) {2 * n / c / 1e12:.2f} TB/s; read (sum) {n / r / 1e12:.2f} TB/s')
"
step push-stamps 60 bash -c "SWITCHYARD_SYMMETRIC_STAMPS=1 $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --json $base/push-stamps.json 2>&1 | tee $base/push-stamps-raw.log | python3 scripts/symmetric_stamps.py; grep -E '^  (dispatch|combine)' $base/push-stamps-raw.log"
step tiles-one-rank 90 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up halves --gemm-tiles --json "$base/tiles-one-rank.json"
start_mps
step process-symmetric-heap 90 ${T}_process_ranks_test --ranks 4 --engine symmetric --heap-tensors on
echo quit | nvidia-cuda-mps-control
for round in 1 2; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-m128-r$round 35 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-m128-r$round.json"
  step layer-direct-r$round 35 env SWITCHYARD_MOE_GEMM_TILES=m128,m128_direct $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-direct-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
