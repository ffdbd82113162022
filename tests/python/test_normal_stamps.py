"""scripts/normal_stamps.py: the summary of a fresh normal dispatch's clock stamps (no GPU needed)."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "normal_stamps.py")


def summarise(lines):
    return subprocess.run([sys.executable, SCRIPT], input="\n".join(lines) + "\n", capture_output=True, text=True)


def stamp_line(sample, rank, entered_ns, after_us):
    """after_us: published, exchanged, notify done, rows started, in us after entered_ns (None: not reached)."""
    values = [entered_ns] + [0 if us is None else entered_ns + int(us * 1000) for us in after_us]
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
    # rank 1's rows kernel was not stamped: only ranks that reached a point count
    assert rows["rows started"] == ["60.0", "60.0", "60.0"]
    assert "rank 0 30.0, rank 1 0.5" in out  # exchanged - published


def test_no_stamps_is_an_error_that_names_the_switch():
    result = summarise(["switchyard-bench output without stamps"])
    assert result.returncode == 1
    assert "SWITCHYARD_NORMAL_PHASES=1" in result.stdout
