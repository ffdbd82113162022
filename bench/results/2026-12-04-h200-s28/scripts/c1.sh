#!/usr/bin/env bash
# Session 28, call 1: where main stands, before any change. Issue 20: DeepEP V1 (567632dd) and
# switchyard.deep_ep side by side (scripts/peer-deepep.sh; 8 and 4 processes under MPS, 128 and 4096 tokens;
# last run in session 14), and switchyard.deep_ep's host cost per call in one process. Issue 21: the layer at
# 4096 x 8 against torch's two fp8 GEMMs in interleaved rounds (tools/peer/layer_vs_torch.py, its first GPU run).
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry28/c1.tar.gz"; BUDGET=560
STEP_FILTER="rror|round|ahead|MISMATCH|FAILED|target|us$|^call|^layout|^cached|^combine|built|switchyard:"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
python3 -c 'import torch, switchyard; print(torch.__version__, switchyard.cuda_available())'
step hostcost 60 python3 tools/peer/deep_ep_host_cost.py --tokens 128 --repeats 150
step peer 330 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=160 bash scripts/peer-deepep.sh
step ltt 200 python3 tools/peer/layer_vs_torch.py --moe-bench $B/tools/moe_bench/switchyard-moe-bench --rounds 5 --json $base/ltt.json
echo "total $((SECONDS - step_start)) s"
