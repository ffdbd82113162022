#!/usr/bin/env bash
# Session 20, call 5 (the session's last device time, so one call): (1) the wider fp8 tiles (m128_n192,
# m128_n160; NOTES "wider fp8 GEMM tiles: the prediction"): the tile test (every tile bitwise against
# m128, N with partial tiles), then moe-bench --gemm-tiles (every tile interleaved in each round, slowest
# rank's median, each checked bitwise against m128 on the layer's rows) at one rank with all 256
# experts and at 8 ranks x 4096 tokens; (2) the engine interface (ac4787a) as processes: every engine at 8
# processes under MPS (and symmetric with heap tensors); (3) the yardstick at 128 tokens, before
# (6290aaf) and after, interleaved; then compute-sanitizer on the tile test.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c5; B=$PWD/build/g5
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/c5-logs.tar.gz" c5 2>/dev/null; true' EXIT
BUDGET=${BUDGET:-540}; STEP_TAR=c5
STEP_FILTER="^  m|^tiles|verdict|^layer|^alone|PASSED|FAILED|ERROR SUMMARY|^  (normal|low_latency|symmetric)|rror"
source scripts/device-step.sh
# t4 last: its moe-bench has the new tiles (t3 carries the earlier one).
for t in t3 t2 t4; do tar -C "$B" -xzf build/gpu-carry5/$t.tar.gz; done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=$B/tests/cuda/switchyard_cuda_moe_layer_test; M=$B/tools/moe_bench/switchyard-moe-bench
step tile-test 60 "$T" --gtest_filter='*GroupedGemmTile*:*SwigluEpilogue*'
step tiles-one-rank 110 "$M" --ranks 1 --tokens 32768 --iters 3 --warmup 1 --gemm-tiles \
  --json "$base/tiles-one-rank.json"
step tiles-8-ranks 110 "$M" --tokens 4096 --iters 3 --warmup 1 --gemm-tiles --json "$base/tiles-8-ranks.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
P=$B/tests/cuda/switchyard_cuda_process_ranks_test
for engine in normal low_latency symmetric; do
  step processes-$engine-np8 40 "$P" --ranks 8 --engine $engine
done
step processes-symmetric-heap-np8 40 "$P" --ranks 8 --engine symmetric --heap-tensors on
step processes-normal-np8-n2x4 40 "$P" --ranks 8 --ranks-per-node 4 --engine normal
echo quit | nvidia-cuda-mps-control
for build in old new old new; do
  bin=$B/tools/bench/switchyard-bench; [ $build = old ] && bin=$bin-old
  step bench128-$build-$SECONDS 50 "$bin" --backend cuda --ranks 8 --tokens 128 --iters 20 \
    --json "$base/bench128-$build-$SECONDS.json"
done
step memcheck-tiles 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='Kinds/MoeGroupedGemmTiles.*'
echo "total $((SECONDS - step_start)) s"
