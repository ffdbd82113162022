#!/usr/bin/env bash
# Session 37, call 1: the whole CUDA build on the device (16 cores; this checkout's 2-core build holds only a few
# targets), in build/dev, kept on the warm machine for call 2 (the owed GPU suite).
cd "$(dirname "$0")/../../../.."
t=$SECONDS
bash scripts/device-build.sh all > "$OUT/c1-build.log" 2>&1; rc=$?
echo "build rc=$rc in $((SECONDS - t)) s"
tail -30 "$OUT/c1-build.log" | grep -E "rror|FAILED|device-build" | tail -15
