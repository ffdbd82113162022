#!/usr/bin/env python3
"""Summarises the symmetric dispatch's phase stamps (src/cuda/symmetric/stamps.cuh).

    SWITCHYARD_SYMMETRIC_STAMPS=1 switchyard-bench --engine symmetric ... 2>&1 | python3 scripts/symmetric_stamps.py

Each sampled call's stamps are taken relative to its earliest block start on any rank; for each phase
the table gives the median over calls of the earliest, median and latest block to reach it (us); a second table,
the fixed steps (grid syncs, the cross-rank signal, the loads, the tables' build) as the last rank to arrive at
the barrier paid them and as every rank did; the last line, the ranks' first blocks in start order
(scripts/stamp_spread.py).

Where a line also carries the SM clock of each phase (cycles), a block's phases are placed by that clock from
its start, scaled to ns by the block's own span from its start to its last stamp, instead of by %globaltimer,
whose ticks may be too coarse for steps of 1-3 us; the start itself stays on %globaltimer, the one clock every
block and rank shares.
"""
import collections
import statistics
import sys

from stamp_spread import Spread, print_start_order

# In the record's order (cuda/symmetric/stamps.cuh, DispatchPhase). "routing synced": the grid sync between
# count and place released (routing in every block); "gathered": the barrier's opening grid sync released;
# "peers seen": block 0 saw every peer's signal; "sources loaded": the sources' records and counts read (push:
# and the begins); "tables built": the row tables built from them; "last load issued" (push: before the first
# row); "walked" (push only).
PHASES = ["start", "counted", "routing synced", "routed", "gathered", "peers seen", "barrier passed",
          "sources loaded", "tables built", "last load issued", "stores drained", "walked", "released"]
COUNTED, SYNCED, ROUTED, GATHERED, SEEN, PASSED, LOADED, TABLED, ISSUED, DRAINED, RELEASED = (
    PHASES.index(name) for name in ("counted", "routing synced", "routed", "gathered", "peers seen", "barrier passed",
                                    "sources loaded", "tables built", "last load issued", "stores drained",
                                    "released"))

# The fixed steps of one rank's call (us): what each grid sync, the cross-rank signal, the loads and the tables'
# build cost that rank. Each runs from the last of its blocks to reach the first point to the last to reach the
# second; a step of block 0 alone (the signal, which only block 0 sends and awaits) from block 0's first point to
# its second.
Step = collections.namedtuple("Step", "name first second block_zero_only")
STEPS = [Step("routing sync (last counted -> last synced)", COUNTED, SYNCED, False),
         Step("barrier's opening sync (last routed -> last gathered)", ROUTED, GATHERED, False),
         Step("signal (block 0 gathered -> peers seen)", GATHERED, SEEN, True),
         Step("barrier's closing sync (peers seen -> last passed)", SEEN, PASSED, False),
         Step("loads (last passed -> last sources loaded)", PASSED, LOADED, False),
         Step("tables' build (last loaded -> last built)", LOADED, TABLED, False),
         Step("first row (last tables built -> last issued)", TABLED, ISSUED, False)]


def rank_steps(blocks):
    """blocks: [(block, stamps)] of one rank in one call -> {step name: us}, for the steps both of whose points
    were reached."""
    steps = {}
    for step in STEPS:
        if step.block_zero_only:
            blocks_here = [(block, stamps) for block, stamps in blocks if block == 0]
            if not blocks_here or not (blocks_here[0][1][step.first] and blocks_here[0][1][step.second]):
                continue
        else:
            blocks_here = blocks
        ends = [stamps[step.first] for _, stamps in blocks_here if stamps[step.first]]
        later = [stamps[step.second] for _, stamps in blocks_here if stamps[step.second]]
        if ends and later:
            steps[step.name] = (max(later) - max(ends)) / 1e3
    return steps


def on_block_clock(at, cycles):
    """One block's phases placed by its SM clock: ns from its %globaltimer start, scaled by the ns per cycle of
    its span from the start to its last stamp; the %globaltimer stamps as they are where the block has no
    clock, or no span to scale by. Phases not reached stay 0."""
    reached = [index for index, value in enumerate(at) if value]
    if not cycles or not reached or not at[0] or reached[-1] == 0:
        return at
    last = reached[-1]
    span_cycles = cycles[last] - cycles[0]
    span_ns = at[last] - at[0]
    if span_cycles <= 0 or span_ns <= 0:
        return at
    scale = span_ns / span_cycles
    return [at[0] + round((cycles[index] - cycles[0]) * scale) if at[index] else 0 for index in range(len(at))]


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
    for step in STEPS:
        if step.name not in every_rank:
            continue
        last = f"{statistics.median(last_rank[step.name]):12.1f}" if last_rank[step.name] else f"{'-':>12}"
        print(f"{step.name:<54} {last} {statistics.median(every_rank[step.name]):13.1f}")


def main() -> int:
    calls = collections.defaultdict(list)  # call -> [(rank, block, stamps)]
    for line in sys.stdin:
        fields = line.split()
        if fields[:1] != ["symstamp"] or len(fields) not in (4 + len(PHASES), 4 + 2 * len(PHASES)):
            continue
        call, rank, block = int(fields[1]), int(fields[2]), int(fields[3])
        values = [int(value) for value in fields[4:]]
        at, cycles = values[:len(PHASES)], values[len(PHASES):]
        calls[call].append((rank, block, on_block_clock(at, cycles)))
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
    for call in sorted(calls):
        blocks = calls[call]
        origin = min(stamps[0] for _, _, stamps in blocks)
        first_start = collections.defaultdict(lambda: None)
        for rank, _, stamps in blocks:
            if first_start[rank] is None or stamps[0] < first_start[rank]:
                first_start[rank] = stamps[0]
        rank_start_spread.append((max(first_start.values()) - origin) / 1e3)
        first_starts_by_call.append(list(first_start.values()))
        spread.add_call([stamps for _, _, stamps in blocks], origin)
    # Every sampled call's own figure too: the samples include warm-up calls, whose ranks the bench does not
    # release together (their spread is smaller), so a median over few samples can be a warm-up call's.
    print(f"{len(calls)} sampled calls; ranks: {len({rank for blocks in calls.values() for rank, _, _ in blocks})}; "
          f"last rank's first block starts {statistics.median(rank_start_spread):.1f} us after the first "
          f"(median; per sampled call: {' '.join(f'{us:.1f}' for us in rank_start_spread)})")
    spread.print_table("phase", 18)
    print_steps(calls)
    print_start_order(first_starts_by_call, "first blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
