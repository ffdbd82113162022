#!/usr/bin/env bash
# Session 21, call 2: GEMM 1's SwiGLU epilogue in cluster pairs (NOTES, session 21: the prediction).
# (1) the epilogue test (bitwise against the separate path, 96 pairs of tiles) and the MoE suite; (2) the
# layer at 4096 tokens, 8 threads: W1 halves (the default path) against interleaved with the epilogue,
# interleaved in rounds, and torch's two fp8 grouped GEMMs in the same call; one rank with all 256
# experts (phases); 8 processes with heap tensors; (3) compute-sanitizer on the epilogue test.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c2; B=$PWD/build/g2
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/c2-logs.tar.gz" c2 2>/dev/null; true' EXIT
tar -C "$B" -xzf build/gpu-carry21/c2.tar.gz
BUDGET=${BUDGET:-575}; STEP_TAR=c2
STEP_FILTER="^layer|^alone|^  (dispatch|gemm|swiglu|combine)|torch|tokens|PASSED|FAILED|ERROR SUMMARY|verdict|rror"
source scripts/device-step.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=$B/tests/cuda/switchyard_cuda_moe_layer_test; M=$B/tools/moe_bench/switchyard-moe-bench
step epilogue-test 60 "$T" --gtest_filter='*SwigluEpilogue*'
L=(--tokens 4096 --iters 3 --warmup 1)
for round in 1 2; do
  step layer-halves-$round 75 "$M" "${L[@]}" --json "$base/layer-halves-$round.json"
  step layer-epilogue-$round 75 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" "${L[@]}" --gate-up interleaved \
    --json "$base/layer-epilogue-$round.json"
done
step torch-grouped-gemm 60 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch.json"
step one-rank-epilogue 60 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" --ranks 1 --tokens 32768 --iters 3 \
  --warmup 1 --gate-up interleaved --json "$base/one-rank-epilogue.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
step processes-epilogue 90 env SWITCHYARD_MOE_SWIGLU_EPILOGUE=on "$M" "${L[@]}" --gate-up interleaved \
  --ranks-as processes --heap on --json "$base/processes-epilogue.json"
echo quit | nvidia-cuda-mps-control
step memcheck-epilogue 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_filter='*SwigluEpilogue*'
step moe-suite 100 "$T"
step racecheck-epilogue 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" \
  --gtest_filter='Clamps/MoeSwigluEpilogue.*/no_clamp'
echo "total $((SECONDS - step_start)) s"
