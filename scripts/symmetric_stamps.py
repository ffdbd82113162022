#!/usr/bin/env python3
"""Summarises the symmetric dispatch's phase stamps (src/cuda/symmetric/stamps.cuh).

    SWITCHYARD_SYMMETRIC_STAMPS=1 switchyard-bench --engine symmetric ... 2>&1 | python3 scripts/symmetric_stamps.py

Each sampled call's stamps are taken relative to its earliest block start on any rank; for each phase
the table gives the median over calls of the earliest, median and latest block to reach it (us); the last
line, the ranks' first blocks in start order (scripts/stamp_spread.py).
"""
import collections
import statistics
import sys

from stamp_spread import Spread, print_start_order

# In the record's order (cuda/symmetric/stamps.cuh, DispatchPhase). "tables loaded": the sources' records and
# counts read and the row tables built; "last load issued" (push: the begins loaded); "walked" (push only).
PHASES = ["start", "counted", "routed", "barrier passed", "tables loaded", "last load issued", "stores drained",
          "walked", "released"]
ROUTED, PASSED, DRAINED, RELEASED = (PHASES.index(name) for name in
                                     ("routed", "barrier passed", "stores drained", "released"))


def main() -> int:
    calls = collections.defaultdict(list)  # call -> [(rank, block, stamps)]
    for line in sys.stdin:
        fields = line.split()
        if len(fields) != 4 + len(PHASES) or fields[0] != "symstamp":
            continue
        call, rank, block = int(fields[1]), int(fields[2]), int(fields[3])
        calls[call].append((rank, block, [int(value) for value in fields[4:]]))
    if not calls:
        print("no symstamp lines (was SWITCHYARD_SYMMETRIC_STAMPS=1 set for the run?)")
        return 1
    spread = Spread(PHASES)
    rank_start_spread = []
    first_starts_by_call = []
    print("per call (us after its first block start): last rank start, routed, barrier passed (first/last), "
          "stores drained (median/last), released (last)")
    for call in sorted(calls):
        blocks = calls[call]
        origin = min(stamps[0] for _, _, stamps in blocks)

        def at(index, pick):
            values = sorted((stamps[index] - origin) / 1e3 for _, _, stamps in blocks if stamps[index] != 0)
            return pick(values) if values else float("nan")

        starts = {}
        for rank, _, stamps in blocks:
            starts[rank] = min(starts.get(rank, stamps[0]), stamps[0])
        print(f"  call {call:5d}: {(max(starts.values()) - origin) / 1e3:8.1f} {at(ROUTED, max):8.1f} "
              f"{at(PASSED, min):8.1f}/{at(PASSED, max):<8.1f} "
              f"{at(DRAINED, lambda v: v[len(v) // 2]):8.1f}/{at(DRAINED, max):<8.1f} {at(RELEASED, max):8.1f}")
    for blocks in calls.values():
        origin = min(stamps[0] for _, _, stamps in blocks)
        first_start = collections.defaultdict(lambda: None)
        for rank, _, stamps in blocks:
            if first_start[rank] is None or stamps[0] < first_start[rank]:
                first_start[rank] = stamps[0]
        rank_start_spread.append((max(first_start.values()) - origin) / 1e3)
        first_starts_by_call.append(list(first_start.values()))
        spread.add_call([stamps for _, _, stamps in blocks], origin)
    print(f"{len(calls)} sampled calls; ranks: {len({rank for blocks in calls.values() for rank, _, _ in blocks})}; "
          f"last rank's first block starts {statistics.median(rank_start_spread):.1f} us after the first")
    spread.print_table("phase", 18)
    print_start_order(first_starts_by_call, "first blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
