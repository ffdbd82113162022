"""scripts/symmetric_stamps.py: the summary of the symmetric dispatch's phase stamps (no GPU needed)."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "symmetric_stamps.py")


def summarise(lines):
    return subprocess.run([sys.executable, SCRIPT], input="\n".join(lines) + "\n", capture_output=True, text=True)


def stamp_line(call, rank, block, start_ns, phases_us, cycles=None):
    """phases_us: counted, synced, routed, gathered, seen, passed, loaded, tabled, issued, drained, walked,
    released in us after start_ns (None: not reached); cycles: the 13 phases' SM clock, or None (a line
    without them)."""
    values = [start_ns] + [0 if us is None else start_ns + int(us * 1000) for us in phases_us]
    if cycles is not None:
        values += cycles
    return "symstamp %d %d %d %s" % (call, rank, block, " ".join(str(v) for v in values))


def step_rows(out):
    return {line[:54].strip(): line[54:].split() for line in out.splitlines()
            if line.startswith(("routing sync", "barrier's", "signal", "loads (", "tables' build", "first row"))}


def test_phases_are_relative_to_the_calls_first_block_start():
    base = 5_000_000_000
    lines = ["progress noise that is not a stamp"]
    for call, offset in ((17, 0), (33, 10_000_000)):
        start = base + offset
        lines.append(stamp_line(call, 0, 0, start,
                                [1.0, 1.4, 2.0, 2.6, 8.0, 8.4, 9.0, 9.4, 20.0, 21.0, 21.5, 22.0]))
        lines.append(stamp_line(call, 0, 1, start + 1000,
                                [None, 0.4, None, 1.6, None, 7.4, 7.9, 8.4, 19.0, 20.0, 20.5, 21.0]))
        # rank 1 starts 5 us later
        lines.append(stamp_line(call, 1, 0, start + 5000,
                                [1.0, 1.2, 2.0, 2.2, 2.4, 2.8, 3.2, 3.8, 14.8, 16.0, None, 17.0]))
    result = summarise(lines)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 sampled calls; ranks: 2; last rank's first block starts 5.0 us after the first" in out
    rows = {line.split()[0]: line.split()[-3:] for line in out.splitlines()
            if line and line.split()[0] in ("start", "counted", "routed", "walked")}
    assert rows["start"] == ["0.0", "1.0", "5.0"]
    # block 1 of rank 0 never counted or routed: only blocks that reached a phase count
    assert rows["counted"] == ["1.0", "6.0", "6.0"]
    assert rows["routed"] == ["2.0", "7.0", "7.0"]
    # rank 1 never walked (a pull's blocks have no walk)
    assert rows["walked"] == ["21.5", "21.5", "21.5"]
    assert "sources loaded" in out and "tables built" in out
    assert "barrier passed" in out and "released" in out
    # the ranks' first blocks in start order: rank 0 at 0, rank 1 5 us later, in both calls
    assert "first blocks, earliest to last rank (us after the earliest, medians): 0.0 5.0" in out
    steps = step_rows(out)
    # Each step from the last block at its first point to the last at its second, per rank (us after the call's
    # first start). Rank 0: counted 1.0 -> synced 1.4, routed 2.0 -> gathered 2.6, block 0 seen 8.0, passed 8.4,
    # loaded 9.0, tables 9.4, issued 20.0. Rank 1: 6.0 -> 6.2, 7.0 -> 7.2, 7.4, 7.8, 8.2, 8.8, 19.8. Rank 1
    # gathered last, so its steps are the last rank's; the other column is the median over both ranks of both
    # calls.
    assert steps["routing sync (last counted -> last synced)"] == ["0.2", "0.3"]
    assert steps["barrier's opening sync (last routed -> last gathered)"] == ["0.2", "0.4"]
    assert steps["signal (block 0 gathered -> peers seen)"] == ["0.2", "2.8"]
    assert steps["barrier's closing sync (peers seen -> last passed)"] == ["0.4", "0.4"]
    assert steps["loads (last passed -> last sources loaded)"] == ["0.4", "0.5"]
    assert steps["tables' build (last loaded -> last built)"] == ["0.6", "0.5"]
    assert steps["first row (last tables built -> last issued)"] == ["11.0", "10.8"]


def test_the_sm_clock_places_a_blocks_phases_between_its_globaltimer_start_and_last_stamp():
    # %globaltimer ticking in 1 us steps: the loads (passed -> loaded) read 0 and the build 1.0 us. The block's
    # SM clock at 2 cycles a ns places them at 0.3 and 0.7 us; the start and the last stamp (released at
    # 30.0 us, 60000 cycles) fix the scale.
    start = 7_000_000_000
    phases = [1.0, 1.0, 2.0, 3.0, 5.0, 6.0, 6.0, 7.0, 8.0, 20.0, None, 30.0]
    precise = [0.0, 1.0, 1.2, 2.0, 2.6, 5.0, 6.0, 6.3, 7.0, 8.0, 20.0, None, 30.0]
    cycles = [100_000 + (0 if us is None else int(us * 2000)) for us in precise]
    result = summarise([stamp_line(1, 0, 0, start, phases, cycles)])
    assert result.returncode == 0, result.stderr
    steps = step_rows(result.stdout)
    assert steps["loads (last passed -> last sources loaded)"] == ["0.3", "0.3"]
    assert steps["tables' build (last loaded -> last built)"] == ["0.7", "0.7"]
    # The same line without its cycles keeps %globaltimer's coarse steps.
    steps = step_rows(summarise([stamp_line(1, 0, 0, start, phases)]).stdout)
    assert steps["loads (last passed -> last sources loaded)"] == ["0.0", "0.0"]
    assert steps["tables' build (last loaded -> last built)"] == ["1.0", "1.0"]


def test_no_stamps_is_an_error_that_names_the_switch():
    result = summarise(["switchyard-bench output without stamps"])
    assert result.returncode == 1
    assert "SWITCHYARD_SYMMETRIC_STAMPS=1" in result.stdout
