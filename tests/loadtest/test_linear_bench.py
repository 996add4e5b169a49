"""`abcd-bench linear` (cpu::Linear alone) on tiny shapes, so the subcommand cannot rot: a point
per format x shape x row count with a positive time and the GFLOP/s that time implies, and bad
input refused with the flag named.

Run from the repository root with ABCD_BENCH=build/loadtest/abcd-bench:
  /usr/bin/python3 -m unittest tests/loadtest/test_linear_bench.py
"""

import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = os.environ.get("ABCD_BENCH", str(ROOT / "build" / "loadtest" / "abcd-bench"))


def run(*args):
    return subprocess.run([BENCH, "linear", *args], capture_output=True, text=True, timeout=60)


class LinearBenchTest(unittest.TestCase):
    def test_tiny_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "linear.json"
            r = run("--weight_formats", "f32,int8", "--shapes", "40x33,7x16", "--rows", "1,3,7",
                    "--rounds", "2", "--json", str(out))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("cpu::Linear alone", r.stdout)
            result = json.loads(out.read_text())["linear"]
        self.assertEqual(result["threads"], 1)
        points = result["results"]
        self.assertEqual(
            [(p["format"], p["in"], p["out"], p["rows"]) for p in points],
            [(f, i, o, rows) for f in ("f32", "int8") for i, o in ((40, 33), (7, 16))
             for rows in (1, 3, 7)])
        for p in points:
            self.assertEqual(len(p["rounds"]), 2)
            self.assertGreater(p["seconds"], 0)
            self.assertIn(p["seconds"], sorted(p["rounds"]) + [sum(p["rounds"]) / 2])
            self.assertAlmostEqual(p["gflops"], 2 * p["rows"] * p["in"] * p["out"] / p["seconds"] / 1e9,
                                   delta=1e-9 * p["gflops"])

    def test_bad_input_is_refused_naming_the_flag(self):
        for args, flag in ((["--shapes", "12"], "--shapes"), (["--shapes", "0x4"], "--shapes"),
                           (["--rows", "0"], "--rows"), (["--weight_formats", "q4"], "--weight_formats"),
                           (["--rounds", "0"], "--rounds"), (["--threads", "0"], "--threads")):
            r = run(*args)
            self.assertEqual(r.returncode, 1, (args, r.stdout, r.stderr))
            self.assertIn(flag, r.stderr, args)


if __name__ == "__main__":
    unittest.main()
