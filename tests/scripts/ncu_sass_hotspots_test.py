#!/usr/bin/env python3
"""scripts/ncu_sass_hotspots.py on a source page shaped as ncu's (session 46's c2): the hot window is found and
ranked by instructions executed, its loop body listed, and a log without the CSV is refused by name."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "ncu_sass_hotspots.py")

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"# Samples","Instructions Executed","Thread Instructions Executed"')


def row(address, text, executed, samples):
    return f'"{address:#x}","      {text}","{samples}","{samples}","{samples}","{executed}","{executed * 32}"'


# A prologue run once per warp, a cold window, and a loop of three instructions run 1000 times a warp at 0x800.
LOG = "\n".join(["==PROF== Connected to process 1", "some bench output", '"Kernel Name","k"', HEADER,
                 row(0x7000, "LDC R1, c[0x0][0x28]", 64, 1),
                 row(0x7010, "S2R R0, SR_TID.X", 64, 0),
                 row(0x7400, "STG.E [R2], R0", 64, 2),
                 row(0x7800, "LDS R21, [R3]", 64000, 30),
                 row(0x7810, "IADD3 R0, R0, 0x1, RZ", 64000, 5),
                 row(0x7820, "@!P0 BRA 0x7800", 64000, 9),
                 row(0x7830, "EXIT", 64, 0)])


def run(stdin, *args):
    return subprocess.run([sys.executable, SCRIPT, *args], input=stdin, capture_output=True, text=True)


class NcuSassHotspots(unittest.TestCase):
    def test_the_loop_window_comes_first_with_its_shares_and_body(self):
        result = run(LOG, "--top", "2", "--window", "1024")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "7 instructions, 192256 warp instructions executed, 47 stall samples")
        self.assertIn("0x000800      192064   99.9%       44   93.6%", lines[3])
        self.assertIn("0x000000", lines[4])
        body = lines[lines.index("window 0x000800: instructions executed >= 6400") + 1:]
        self.assertEqual([line.split()[0] for line in body[:3]], ["0x000800", "0x000810", "0x000820"])
        self.assertTrue(body[0].endswith("LDS R21, [R3]"))
        self.assertFalse(any("EXIT" in line for line in body[:3]))

    def test_a_log_without_the_source_page_is_refused_by_name(self):
        result = run("==PROF== Connected\nno csv here\n")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn('no CSV source page (no line starting with "Address")', result.stderr)


if __name__ == "__main__":
    unittest.main()
