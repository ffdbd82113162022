#!/usr/bin/env bash
# Session 37, call 2 (warm after call 1, whose build/dev it uses): the GPU suite owed since session 36's CUDA
# changes (the failed-dispatch stand-ins; the checks moved to tests/cuda/failed_dispatch.hpp): every suite as
# threads, processes and killed ranks under MPS, then compute-sanitizer at one rank.
cd "$(dirname "$0")/../../../.."
[ -x build/dev/tests/cuda/switchyard_cuda_normal_engine_test ] || { echo "no build/dev: call 1 first"; exit 1; }
OUT=$OUT/c2 SWITCHYARD_GPU_BUILD=build/dev SWITCHYARD_GPU_CPU_TESTS=0 SWITCHYARD_GPU_STAGES="tests processes sanitizer" \
  bash scripts/gpu-check.sh 2>&1 | tail -80
