#!/usr/bin/env bash
# Session 45 c2: scripts/gpu-check.sh's sanitizer stage whole (memcheck, racecheck with the known false
# reports allowed, synccheck; every suite with one-rank cases), on the binaries of build/gpu-local (main's
# 885c7b4 code). Owed since session 43 as one stage. Pack:
#   SWITCHYARD_PACK_ONLY='(normal_engine|cuda_low_latency_test|cuda_symmetric_test|device_transport|hostile_calls|rank_mask|moe_layer|mapped_host_words)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry45/san.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# First, one ncu step (issue 20's decode dispatch: its fixed steps take ~7-10 us each with little work, session
# 43's stamps): the symmetric dispatch of one rank at 128 tokens, its warps' stall reasons. Prediction: if the
# kernel's code (~1 MB object) is fetched cold at each call, "no instruction" is a large share of the stalls
# (> 20 %); if it is under ~5 %, the instruction cache is ruled out for the fixed steps (session 42's item 3).
# BACKOFF (default unset: the library's default) sets SWITCHYARD_SHARED_WAIT_BACKOFF_NS for the whole stage.
# Prediction: every run passes but the normal suite's racecheck, which passes only if c1 showed that the
# reducing warps' backoff lets the two stopped ring cases finish (and BACKOFF is then 200).
cd "$(dirname "$0")/../../../.."
CALL=s45c2; CARRY="build/gpu-carry45/san.tar.xz build/gpu-carry45/c1.tar.xz"; BUDGET=585
STEP_FILTER="^== |FAIL|rror"
source scripts/device-call.sh
step ncu-dispatch-r1 90 ncu --clock-control none -k regex:symmetric_dispatch -s 3 -c 1 --section WarpStateStats \
  --section SchedulerStats --section LaunchStats --section SourceCounters --page raw $B/tools/bench/switchyard-bench --backend cuda \
  --engine symmetric --ranks 1 --tokens 128 --iters 3 --warmup 2 --symmetric-heap on --symmetric-combine pull
grep -E "stalled_[a-z_]+( |_per_warp_active.pct)|gpu__time_duration.sum" "$base/ncu-dispatch-r1.log" | grep -v "not_issued" | head -60
extra=()
[ -n "${BACKOFF:-}" ] && extra=(SWITCHYARD_SHARED_WAIT_BACKOFF_NS=$BACKOFF)
step sanitizer 575 env "${extra[@]}" OUT="$base/gpu-check" SWITCHYARD_GPU_BUILD="$B" SWITCHYARD_GPU_STAGES=sanitizer \
  SWITCHYARD_SANITIZER_TIMEOUT=170 bash scripts/gpu-check.sh
echo "total $((SECONDS - step_start)) s"
