#!/usr/bin/env python3
"""Summarises a fresh `normal` dispatch's clock stamps (src/cuda/normal/dispatch_phases.hpp).

    SWITCHYARD_NORMAL_PHASES=1 switchyard-bench --engine normal ... 2>&1 | python3 scripts/normal_stamps.py
    (SWITCHYARD_NORMAL_PHASES=stamps: the stamps without the events, which slow the call)

Every rank stamps the same sampled calls with %globaltimer, one clock for the ranks of a GPU. Each call's
stamps are taken relative to its earliest notify entry on any rank; for each point the table gives the median
over calls of the first, median and last rank to reach it (us), the ranks' notify entries in start order
(scripts/stamp_spread.py), then each rank's median wait at the notify's
barrier (exchanged - published): what the notify step spends waiting for the last rank to publish its counts.
Lines with the host's two clock words (counts seen, rows kernel launched; CLOCK_REALTIME) also give, per rank,
the median of the host's part (launched - counts seen) beside the device's gap (rows started - notify done):
the two clocks differ by an offset, so only intervals on one clock are compared.
"""
import collections
import statistics
import sys

from stamp_spread import Spread, print_start_order

POINTS = ["notify entered", "published", "exchanged", "notify done", "rows started"]
HOST_POINTS = ["host counts seen", "host rows launched"]


def main() -> int:
    calls = collections.defaultdict(dict)  # sample -> {rank: stamps}
    for line in sys.stdin:
        fields = line.split()
        if fields[:1] != ["normstamp"] or len(fields) not in (3 + len(POINTS), 3 + len(POINTS) + len(HOST_POINTS)):
            continue
        sample, rank = int(fields[1]), int(fields[2])
        calls[sample][rank] = [int(value) for value in fields[3:]]
    if not calls:
        print("no normstamp lines (was SWITCHYARD_NORMAL_PHASES=1 or stamps set for the run?)")
        return 1
    spread = Spread(POINTS)
    barrier_wait = collections.defaultdict(list)  # rank -> us
    host_part = collections.defaultdict(list)  # rank -> us: host launched - host counts seen
    device_gap = collections.defaultdict(list)  # rank -> us: rows started - notify done
    for ranks in calls.values():
        origin = min(stamps[0] for stamps in ranks.values() if stamps[0] != 0)
        spread.add_call(ranks.values(), origin)
        for rank, stamps in ranks.items():
            if stamps[1] != 0 and stamps[2] != 0:
                barrier_wait[rank].append((stamps[2] - stamps[1]) / 1e3)
            if stamps[3] != 0 and stamps[4] != 0:
                device_gap[rank].append((stamps[4] - stamps[3]) / 1e3)
            if len(stamps) > len(POINTS) and stamps[5] != 0 and stamps[6] != 0:
                host_part[rank].append((stamps[6] - stamps[5]) / 1e3)
    ranks = sorted({rank for ranks in calls.values() for rank in ranks})
    print(f"{len(calls)} sampled calls; ranks: {len(ranks)}; us after the call's first notify entry")
    spread.print_table("point", 16)
    print_start_order([[stamps[0] for stamps in ranks.values() if stamps[0] != 0] for ranks in calls.values()],
                      "notify entries")
    print("median wait at the barrier (exchanged - published), us: " +
          ", ".join(f"rank {rank} {statistics.median(barrier_wait[rank]):.1f}" for rank in ranks
                    if barrier_wait[rank]))
    print("median gap from notify done to rows started (device clock), us: " +
          ", ".join(f"rank {rank} {statistics.median(device_gap[rank]):.1f}" for rank in ranks if device_gap[rank]))
    if any(host_part.values()):
        print("median host part, counts seen to rows kernel launched (host clock), us: " +
              ", ".join(f"rank {rank} {statistics.median(host_part[rank]):.1f}" for rank in ranks
                        if host_part[rank]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
