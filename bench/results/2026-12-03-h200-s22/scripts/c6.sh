#!/usr/bin/env bash
# Session 22, call 6 (inline, on call 5's warm machine and binaries; this is that command): the symmetric
# engine at 128 tokens, 8 threads, before / after, with the pull forced each way (SWITCHYARD_SYMMETRIC_PULL),
# two rounds: whether call 5's slower graph replay of the dispatch (default pull) follows the binary.
B=build/g5; mkdir -p out/c6
S=(--backend cuda --engine symmetric --iters 50 --warmup 5 --ranks 8 --symmetric-heap on --symmetric-combine pull --ranks-as threads)
for r in 1 2; do for v in old new; do for p in tma warps; do
  SWITCHYARD_SYMMETRIC_PULL=$p timeout 25 $B/$v/switchyard-bench "${S[@]}" > out/c6/sym128-$p-$v-r$r.log 2>&1
  echo "$p $v r$r rc=$?"; grep -E "^  dispatch" out/c6/sym128-$p-$v-r$r.log
done; done; done
tar -C out -czf $OUT/c6-logs.tar.gz c6
