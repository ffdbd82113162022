#!/usr/bin/env bash
# Session 22, call 4 (run inline while the machine was still warm from call 3; this is that command): the
# symmetric engine at 2/4/8 processes under MPS, a killed rank at 8 processes, the MoE layer at 4096 tokens
# as 8 processes with heap tensors; then the internode, low_latency internode and device transport suites.
mkdir -p out/c4 build/g4 && tar -C build/g4 -xzf build/gpu-carry22/c4.tar.gz && T=build/g4/tests/cuda/switchyard_cuda
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for r in 2 4 8; do timeout 60 ${T}_process_ranks_test --ranks $r --engine symmetric > out/c4/proc-sym-$r.log 2>&1; echo "proc sym $r rc=$?"; tail -2 out/c4/proc-sym-$r.log; done
timeout 60 ${T}_killed_rank_test --ranks 8 --engine symmetric > out/c4/killed-sym-8.log 2>&1; echo "killed rc=$?"; tail -2 out/c4/killed-sym-8.log
timeout 100 build/g4/tools/moe_bench/switchyard-moe-bench --tokens 4096 --iters 3 --warmup 1 --ranks-as processes --heap on > out/c4/layer4096-processes.log 2>&1
echo "layer proc rc=$?"; grep -E "^layer|^alone|verdict|^  " out/c4/layer4096-processes.log | tail -9; echo quit | nvidia-cuda-mps-control
timeout 100 ${T}_internode_test --gtest_brief=1 > out/c4/internode.log 2>&1; echo "internode rc=$?"; tail -1 out/c4/internode.log
timeout 60 ${T}_low_latency_internode_test --gtest_brief=1 > out/c4/ll-internode.log 2>&1; echo "ll-internode rc=$?"; tail -1 out/c4/ll-internode.log
timeout 40 ${T}_device_transport_test --gtest_brief=1 > out/c4/transport.log 2>&1; echo "transport rc=$?"; tail -1 out/c4/transport.log
tar -C out -czf $OUT/c4-logs.tar.gz c4
