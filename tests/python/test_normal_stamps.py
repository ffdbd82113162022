"""scripts/normal_stamps.py: the summary of a fresh normal dispatch's clock stamps (no GPU needed)."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "normal_stamps.py")


def summarise(lines):
    return subprocess.run([sys.executable, SCRIPT], input="\n".join(lines) + "\n", capture_output=True, text=True)


def stamp_line(sample, rank, entered_ns, after_us, host_ns=None):
    """after_us: published, exchanged, notify done, rows started, in us after entered_ns (None: not reached);
    host_ns: the host's two clock words (counts seen, rows launched), or None for a line without them."""
    values = [entered_ns] + [0 if us is None else entered_ns + int(us * 1000) for us in after_us]
    if host_ns is not None:
        values += list(host_ns)
    return "normstamp %d %d %s" % (sample, rank, " ".join(str(v) for v in values))


def test_points_are_relative_to_the_calls_first_notify_entry_on_any_rank():
    base = 7_000_000_000
    lines = ["normal phases: rank 0, 2 fresh dispatches, median us: layout 16.0"]
    for sample, offset in ((0, 0), (1, 50_000_000)):
        entered = base + offset
        # rank 0 enters first, publishes at 5 us and waits at the barrier for rank 1, which enters 30 us later
        # and publishes 4.5 us after that; both pass the barrier at 35
        lines.append(stamp_line(sample, 0, entered, [5.0, 35.0, 42.0, 60.0]))
        lines.append(stamp_line(sample, 1, entered + 30_000, [4.5, 5.0, 12.0, None]))
    result = summarise(lines)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 sampled calls; ranks: 2" in out
    rows = {" ".join(line.split()[:-3]): line.split()[-3:] for line in out.splitlines() if line.split()
            and line.split()[0] in ("notify", "published", "exchanged", "rows")}
    assert rows["notify entered"] == ["0.0", "30.0", "30.0"]
    assert rows["published"] == ["5.0", "34.5", "34.5"]
    assert rows["exchanged"] == ["35.0", "35.0", "35.0"]
    assert "notify entries, earliest to last rank (us after the earliest, medians): 0.0 30.0" in out
    # rank 1's rows kernel was not stamped: only ranks that reached a point count
    assert rows["rows started"] == ["60.0", "60.0", "60.0"]
    assert "rank 0 30.0, rank 1 0.5" in out  # exchanged - published


def test_no_stamps_is_an_error_that_names_the_switch():
    result = summarise(["switchyard-bench output without stamps"])
    assert result.returncode == 1
    assert "SWITCHYARD_NORMAL_PHASES=1" in result.stdout


def test_host_words_give_the_hosts_part_beside_the_devices_gap_each_on_its_own_clock():
    host = 123_000_000_000  # another clock: only its intervals mean anything
    lines = [stamp_line(0, 0, 5_000_000_000, [5.0, 35.0, 42.0, 90.0], (host, host + 6_500)),
             stamp_line(0, 1, 5_000_030_000, [4.5, 5.0, 12.0, 58.0], (host + 40_000, host + 44_000)),
             stamp_line(1, 0, 6_000_000_000, [5.0, 35.0, 42.0, 92.0], (host, host + 7_500))]
    result = summarise(lines)
    assert result.returncode == 0, result.stderr
    assert "notify done to rows started (device clock), us: rank 0 49.0, rank 1 46.0" in result.stdout
    assert "rows kernel launched (host clock), us: rank 0 7.0, rank 1 4.0" in result.stdout


def test_lines_without_host_words_print_no_host_part():
    result = summarise([stamp_line(0, 0, 5_000_000_000, [5.0, 35.0, 42.0, 90.0])])
    assert result.returncode == 0, result.stderr
    assert "device clock" in result.stdout and "host clock" not in result.stdout
