#!/usr/bin/env python3
"""scripts/symmetric_stamps.py on synthetic symstamp lines: each sampled call's launch spread is printed beside the
median (session 44: the samples mix warm-up calls, whose ranks are not released together, with timed ones), in
call order, and the steps and start order come out of the same lines."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "symmetric_stamps.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import symmetric_stamps  # noqa: E402

PHASES = len(symmetric_stamps.PHASES)


def stamp_line(call, rank, block, start_ns):
    """A block that reached every phase, 1 us apart from its start (%globaltimer only, no SM clock)."""
    at = [start_ns + 1000 * index for index in range(PHASES)]
    return " ".join(["symstamp", str(call), str(rank), str(block)] + [str(value) for value in at])


def call_lines(call, rank_starts_us, base_ns):
    """Two blocks per rank; rank r's first block starts rank_starts_us[r] after base_ns, its second 0.5 us later."""
    lines = []
    for rank, start_us in enumerate(rank_starts_us):
        first = base_ns + int(start_us * 1000)
        lines.append(stamp_line(call, rank, 0, first))
        lines.append(stamp_line(call, rank, 1, first + 500))
    return lines


def summarise(lines):
    completed = subprocess.run([sys.executable, SCRIPT], input="\n".join(lines) + "\n", text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return completed.returncode, completed.stdout


class Summary(unittest.TestCase):
    def test_every_sampled_calls_spread_in_call_order(self):
        # Given out of order: a timed call (ranks 2.8 us apart) before a warm-up call (1 us apart).
        lines = (call_lines(33, [0.0, 2.8, 5.6, 8.4], 10_000_000) + ["an unrelated line"] +
                 call_lines(1, [0.0, 1.0, 2.0, 3.0], 1_000_000) + call_lines(17, [0.0, 1.0, 2.0, 3.5], 5_000_000))
        status, output = summarise(lines)
        self.assertEqual(status, 0, output)
        self.assertIn("3 sampled calls; ranks: 4; last rank's first block starts 3.5 us after the first "
                      "(median; per sampled call: 3.0 3.5 8.4)", output)
        self.assertIn("  call     1:      3.0", output)
        self.assertIn("  call    33:      8.4", output)
        # The start order: medians over the calls of each rank's place.
        self.assertIn("first blocks, earliest to last rank (us after the earliest, medians): 0.0 1.0 2.0 3.5",
                      output)
        # The fixed steps: every phase 1 us after the one before in every block.
        self.assertIn("routing sync (last counted -> last synced)", output)

    def test_no_stamps_is_an_error(self):
        status, output = summarise(["switchyard-bench: no stamps here"])
        self.assertEqual(status, 1)
        self.assertIn("no symstamp lines", output)


if __name__ == "__main__":
    unittest.main()
