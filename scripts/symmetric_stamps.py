#!/usr/bin/env python3
"""Summarises the symmetric dispatch's phase stamps (src/cuda/symmetric/stamps.cuh).

    SWITCHYARD_SYMMETRIC_STAMPS=1 switchyard-bench --engine symmetric ... 2>&1 | python3 scripts/symmetric_stamps.py

Each sampled call's stamps are taken relative to its earliest block start on any rank; for each phase
the table gives the median over calls of the earliest, median and latest block to reach it (us); a second table,
the fixed steps (grid syncs, the cross-rank signal, the tables) as the last rank to arrive at the barrier paid
them and as every rank did; the last line, the ranks' first blocks in start order (scripts/stamp_spread.py).
"""
import collections
import statistics
import sys

from stamp_spread import Spread, print_start_order

# In the record's order (cuda/symmetric/stamps.cuh, DispatchPhase). "routing synced": the grid sync between
# count and place released (routing in every block); "gathered": the barrier's opening grid sync released;
# "peers seen": block 0 saw every peer's signal; "tables loaded": the sources' records and counts read and the
# row tables built; "last load issued" (push: the begins loaded); "walked" (push only).
PHASES = ["start", "counted", "routing synced", "routed", "gathered", "peers seen", "barrier passed",
          "tables loaded", "last load issued", "stores drained", "walked", "released"]
COUNTED, SYNCED, ROUTED, GATHERED, SEEN, PASSED, TABLED, ISSUED, DRAINED, RELEASED = (
    PHASES.index(name) for name in ("counted", "routing synced", "routed", "gathered", "peers seen", "barrier passed",
                                    "tables loaded", "last load issued", "stores drained", "released"))

# The fixed steps of one rank's call, each from the last of its blocks to reach the first point to the last
# to reach the second (us): what each grid sync, the cross-rank signal and the tables cost that rank.
STEPS = [("routing sync (last counted -> last synced)", COUNTED, SYNCED),
         ("barrier's opening sync (last routed -> last gathered)", ROUTED, GATHERED),
         ("signal (block 0 gathered -> peers seen)", GATHERED, SEEN),
         ("barrier's closing sync (peers seen -> last passed)", SEEN, PASSED),
         ("tables (last passed -> last tables loaded)", PASSED, TABLED),
         ("first row (last tables loaded -> last issued)", TABLED, ISSUED)]


def rank_steps(blocks):
    """blocks: [(block, stamps)] of one rank in one call -> {step: us}, for the steps both of whose points some
    block reached."""
    steps = {}
    for name, first, second in STEPS:
        if first == GATHERED and second == SEEN:
            zero = [stamps for block, stamps in blocks if block == 0]
            if zero and zero[0][first] and zero[0][second]:
                steps[name] = (zero[0][second] - zero[0][first]) / 1e3
            continue
        ends = [stamps[first] for _, stamps in blocks if stamps[first]]
        later = [stamps[second] for _, stamps in blocks if stamps[second]]
        if ends and later:
            steps[name] = (max(later) - max(ends)) / 1e3
    return steps


def print_steps(calls):
    """The steps of the rank that passed the barrier last (the one every other rank waited for), and of every
    rank, as medians over the calls."""
    last_rank = collections.defaultdict(list)
    every_rank = collections.defaultdict(list)
    for blocks in calls.values():
        by_rank = collections.defaultdict(list)
        for rank, block, stamps in blocks:
            by_rank[rank].append((block, stamps))
        gathered = {rank: max((stamps[GATHERED] for _, stamps in rank_blocks if stamps[GATHERED]), default=0)
                    for rank, rank_blocks in by_rank.items()}
        latest = max(gathered, key=gathered.get)
        for rank, rank_blocks in by_rank.items():
            for name, us in rank_steps(rank_blocks).items():
                every_rank[name].append(us)
                if rank == latest:
                    last_rank[name].append(us)
    if not every_rank:
        return
    print(f"{'step':<54} {'last rank us':>12} {'every rank us':>13}")
    for name, _, _ in STEPS:
        if name not in every_rank:
            continue
        last = f"{statistics.median(last_rank[name]):12.1f}" if last_rank[name] else f"{'-':>12}"
        print(f"{name:<54} {last} {statistics.median(every_rank[name]):13.1f}")


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
    print_steps(calls)
    print_start_order(first_starts_by_call, "first blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
