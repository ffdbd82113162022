"""tools/peer/layer_vs_torch.py: the layer against torch in interleaved rounds (no GPU needed: both sides are
stand-ins that write the JSON the real tools write)."""
import json
import os
import stat
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "peer", "layer_vs_torch.py")

# A stand-in for switchyard-moe-bench: the next of LAYER_US per call, its arguments logged.
FAKE_BENCH = """#!{python}
import json, sys
log, times = {log!r}, {times!r}
with open(log, "a") as out:
    out.write("layer " + " ".join(sys.argv[1:]) + "\\n")
calls = sum(1 for line in open(log) if line.startswith("layer"))
if calls > len(times):
    sys.exit(7)
json.dump({{"layer_us": times[calls - 1]}}, open(sys.argv[sys.argv.index("--json") + 1], "w"))
"""

# A stand-in for torch_grouped_gemm.py: always 25000 us.
FAKE_TORCH = """import json, sys
with open({log!r}, "a") as out:
    out.write("torch " + " ".join(sys.argv[1:]) + "\\n")
json.dump([{{"us": 25000.0}}], open(sys.argv[sys.argv.index("--json") + 1], "w"))
"""


def stand_ins(tmp_path, layer_times):
    log = str(tmp_path / "calls.log")
    bench = tmp_path / "moe-bench"
    bench.write_text(FAKE_BENCH.format(python=sys.executable, log=log, times=layer_times))
    bench.chmod(bench.stat().st_mode | stat.S_IEXEC)
    torch = tmp_path / "torch.py"
    torch.write_text(FAKE_TORCH.format(log=log))
    return str(bench), str(torch), log


def run(bench, torch, *args):
    return subprocess.run([sys.executable, SCRIPT, "--moe-bench", bench, "--torch-script", torch, *args],
                          capture_output=True, text=True)


def test_rounds_alternate_and_share_one_protocol(tmp_path):
    bench, torch, log = stand_ins(tmp_path, [24500.0, 25500.0, 24000.0])
    out_json = str(tmp_path / "rounds.json")
    result = run(bench, torch, "--rounds", "3", "--warmup", "4", "--iters", "12", "--json", out_json, "--",
                 "--heap", "on")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the layer ahead in 2 of 3 rounds" in result.stdout
    assert "layer / torch median 0.9800, range 0.9600-1.0200" in result.stdout
    calls = [line.split() for line in open(log)]
    # layer first in rounds 1 and 3, torch first in round 2
    assert [call[0] for call in calls] == ["layer", "torch", "torch", "layer", "layer", "torch"]
    for call in calls:
        arguments = " ".join(call[1:])
        assert "--warmup 4 --iters 12" in arguments, arguments
    assert all("--heap on" in " ".join(call) and "--check-tokens 0" in " ".join(call)
               for call in calls if call[0] == "layer")
    rounds = json.load(open(out_json))["rounds"]
    assert [r["layer"] for r in rounds] == [24500.0, 25500.0, 24000.0]
    assert all(r["torch"] == 25000.0 for r in rounds)


def test_a_failed_side_fails_the_run_and_names_the_round(tmp_path):
    bench, torch, _ = stand_ins(tmp_path, [24500.0])  # the second layer call exits 7
    result = run(bench, torch, "--rounds", "2")
    assert result.returncode == 1
    assert "round 1: layer" in result.stdout
    assert "round 2, layer: failed (exit status 7)" in result.stdout


def test_counts_must_be_positive(tmp_path):
    bench, torch, log = stand_ins(tmp_path, [24500.0])
    result = run(bench, torch, "--rounds", "0")
    assert result.returncode == 2
    assert "--rounds: expected a positive count, got 0" in result.stderr
    assert not os.path.exists(log)
