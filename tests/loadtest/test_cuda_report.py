"""loadtest/cuda_report.py on a small output folder written here: the goals are judged from the
numbers (met and missed both), the abc vs softmax ratios and the server's CUDA/CPU ratio are
computed from the runs, and missing optional inputs leave their sections out.

Run from the repository root: /usr/bin/python3 -m unittest tests/loadtest/test_cuda_report.py
"""

import json
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))

from cuda_report import render  # noqa: E402


def decode_point(model, context, batch, step, floor, eager=None, state=1024):
    return {"model": model, "context": context, "batch": batch, "state_bytes_per_sequence": state,
            "weight_bytes": 10**9, "step_seconds": step, "floor_seconds": floor, "graphs": context == 0,
            "eager_step_seconds": step if eager is None else eager, "tokens_per_second": batch / step}


def server_run(throughput):
    return {"completed": 10, "failed": 0, "output_throughput": throughput, "median_ttft_ms": 5.0,
            "median_tpot_ms": 1.0, "p99_tpot_ms": 2.0}


BENCH = {
    "device": {"name": "Test GPU", "sms": 132, "date": "2026-11-23 12:00 UTC"},
    "bandwidth": {"bytes_per_second": 3.0e12, "buffer_bytes": 1 << 30},
    "kernels": [
        {"kernel": "abc", "batch": 256, "state_bytes_per_sequence": 4096, "seconds": 1e-5,
         "bytes_per_second": 2.4e12, "fraction_of_copy_bandwidth": 0.8},
        {"kernel": "rfa", "batch": 256, "state_bytes_per_sequence": 4096, "seconds": 1e-5,
         "bytes_per_second": 1.8e12, "fraction_of_copy_bandwidth": 0.6},
        {"kernel": "rfa", "batch": 1, "state_bytes_per_sequence": 4096, "seconds": 1e-6,
         "bytes_per_second": 0.3e12, "fraction_of_copy_bandwidth": 0.1},
    ],
    "decode": [
        decode_point("abc", 0, 1, 0.3e-3, 0.1e-3, eager=0.5e-3),
        decode_point("abc", 0, 256, 1.6e-3, 1.0e-3),
        decode_point("softmax", 4096, 1, 0.6e-3, 0.2e-3, state=8 * 1024 * 1024),
        decode_point("softmax", 4096, 256, 8.0e-3, 6.0e-3, state=8 * 1024 * 1024),
    ],
    "reference": {"torch": "2.11.0", "results": [
        {"label": "abc", "batch": 1, "engine_step_ms": 0.3, "reference_step_ms": 3.0, "speedup": 10.0,
         "argmax_agree": 64, "argmax_steps": 64, "max_abs_logit_diff": 1e-2,
         "reference_cuda_graph": {"reference_step_ms": 0.9, "speedup": 3.0}},
        {"label": "softmax", "batch": 1, "engine_step_ms": 0.6, "reference_step_ms": 3.0, "speedup": 5.0,
         "argmax_agree": 64, "argmax_steps": 64, "max_abs_logit_diff": 1e-2,
         "reference_cuda_graph": {"note": "the state changes shape"}},
    ]},
}


class CudaReportTest(unittest.TestCase):
    def write(self, folder, with_server=True):
        (folder / "cuda_bench.json").write_text(json.dumps(BENCH))
        (folder / "gpu.txt").write_text("name, driver_version, memory.total\nTest GPU, 580.1, 81559 MiB\n")
        if with_server:
            (folder / "server_cuda-c1.json").write_text(json.dumps(server_run(1000.0)))
            (folder / "server_cpu-c1.json").write_text(json.dumps(server_run(100.0)))

    def test_judges_the_goals_from_the_numbers(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.write(Path(tmp))
            text = render(tmp)
        self.assertIn("# CUDA backend benchmarks: Test GPU, 2026-11-23 12:00 UTC", text)
        self.assertIn("3000 GB/s", text)
        self.assertIn("`Test GPU, 580.1, 81559 MiB`", text)
        # Kernels: batch 1 does not count; the worst at batch >= 256 is rfa's 60%.
        self.assertIn("Worst: 60%: **missed**", text)
        # Decode: batch 1 at exactly 3x meets its goal, batch 256 at 1.6x misses 1.5x.
        self.assertIn("batch 1: goal <= 3.0x the floor; worst 3.00x (abc, context any, batch 1): met", text)
        self.assertIn("worst 1.60x (abc, context any, batch 256): **missed**", text)

    def test_ratios_come_from_the_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.write(Path(tmp))
            text = render(tmp)
        # softmax / abc step time: 0.6 / 0.3 served, 0.6 / 0.5 eager; memory 8 MiB / 1 KiB.
        self.assertIn("| abc | 4096 | 1 | 2.00x | 1.20x | 8192.0x |", text)
        self.assertIn("| abc | 4096 | 256 | 5.00x | 5.00x | 8192.0x |", text)
        self.assertIn("| abc | 1 | 0.300 | 3.000 | 10.00x | 0.900 | 3.00x | 64/64 |", text)
        self.assertIn("the state changes shape", text)
        self.assertIn("| cuda / cpu | 1 |  |  | 10.0x |", text)

    def test_optional_inputs_are_left_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.write(Path(tmp), with_server=False)
            text = render(tmp)
        self.assertNotIn("abcd-server end to end", text)
        self.assertIn("## Decode steps", text)


if __name__ == "__main__":
    unittest.main()
