#!/usr/bin/env python3
"""Summarises a fresh `normal` dispatch's clock stamps (src/cuda/normal/dispatch_phases.hpp).

    SWITCHYARD_NORMAL_PHASES=1 switchyard-bench --engine normal ... 2>&1 | python3 scripts/normal_stamps.py

Every rank stamps the same sampled calls with %globaltimer, one clock for the ranks of a GPU. Each call's
stamps are taken relative to its earliest notify entry on any rank; for each point the table gives the median
over calls of the first, median and last rank to reach it (us), then each rank's median wait at the notify's
barrier (exchanged - published): what the notify step spends waiting for the last rank to publish its counts.
"""
import collections
import statistics
import sys

POINTS = ["notify entered", "published", "exchanged", "notify done", "rows started"]


def main() -> int:
    calls = collections.defaultdict(dict)  # sample -> {rank: stamps}
    for line in sys.stdin:
        fields = line.split()
        if len(fields) != 3 + len(POINTS) or fields[0] != "normstamp":
            continue
        sample, rank = int(fields[1]), int(fields[2])
        calls[sample][rank] = [int(value) for value in fields[3:]]
    if not calls:
        print("no normstamp lines (was SWITCHYARD_NORMAL_PHASES=1 set for the run?)")
        return 1
    spread = {point: ([], [], []) for point in POINTS}
    barrier_wait = collections.defaultdict(list)  # rank -> us
    for ranks in calls.values():
        origin = min(stamps[0] for stamps in ranks.values() if stamps[0] != 0)
        for index, point in enumerate(POINTS):
            values = sorted((stamps[index] - origin) / 1e3 for stamps in ranks.values() if stamps[index] != 0)
            if not values:
                continue
            spread[point][0].append(values[0])
            spread[point][1].append(values[len(values) // 2])
            spread[point][2].append(values[-1])
        for rank, stamps in ranks.items():
            if stamps[1] != 0 and stamps[2] != 0:
                barrier_wait[rank].append((stamps[2] - stamps[1]) / 1e3)
    ranks = sorted({rank for ranks in calls.values() for rank in ranks})
    print(f"{len(calls)} sampled calls; ranks: {len(ranks)}; us after the call's first notify entry")
    print(f"{'point':<16} {'first us':>9} {'median us':>10} {'last us':>9}")
    for point in POINTS:
        first, median, last = spread[point]
        if not first:
            print(f"{point:<16} {'-':>9} {'-':>10} {'-':>9}")
            continue
        print(f"{point:<16} {statistics.median(first):9.1f} {statistics.median(median):10.1f} "
              f"{statistics.median(last):9.1f}")
    print("median wait at the barrier (exchanged - published), us: " +
          ", ".join(f"rank {rank} {statistics.median(barrier_wait[rank]):.1f}" for rank in ranks
                    if barrier_wait[rank]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
