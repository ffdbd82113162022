#!/usr/bin/env bash
# Session 46's next-c1.sh, run in session 47.
# scripts/gpu-check.sh's sanitizer stage whole on main's build, with the normal suite's new racecheck filter
# (RACECHECK_FILTER: the wide-ring case and the in-place cases; memcheck and synccheck keep the small rings).
# Pack (the 8 suites with one-rank cases, ~32 MB; the tracked tree is ~11 MB since session 46 packed the old logs,
# so a carry of 64 MiB has room to spare):
#   SWITCHYARD_PACK_ONLY='(normal_engine|cuda_low_latency_test|cuda_symmetric_test|device_transport|hostile_calls|rank_mask|moe_layer|mapped_host_words)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry47/san.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions: every run passes: memcheck and synccheck on every suite as in session 45's c2 (the small rings
# included); racecheck on the normal suite now passes (0 hazards: Small_R1_fp8_wide_rings, the in-place cases,
# ExpertIdOutOfRange), and on the symmetric, rank-mask and MoE suites with only the known false reports.
cd "$(dirname "$0")/../../../.."
CALL=s47c1; CARRY=${CARRY:-build/gpu-carry47/san.tar.xz}; BUDGET=${BUDGET:-585}
STEP_FILTER="^== |FAIL|rror"
source scripts/device-call.sh
step sanitizer 575 env OUT="$base/gpu-check" SWITCHYARD_GPU_BUILD="$B" SWITCHYARD_GPU_STAGES=sanitizer \
  SWITCHYARD_SANITIZER_TIMEOUT=170 bash scripts/gpu-check.sh
echo "total $((SECONDS - step_start)) s"
