#!/usr/bin/env bash
# Session 37, call 2: the GPU Python suite (torch tensors, ranks as processes under MPS), owed since session 36's
# CUDA changes, and its new check of the timer hold's marks; pip installs the package as users do.
cd "$(dirname "$0")/../../../.."
OUT=$OUT/c2 timeout 560 bash scripts/gpu-python-check.sh 2>&1 | tail -40
