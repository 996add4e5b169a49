"""loadtest/ncu_kernel_summary.py on a small ncu CSV written here: only the last step (from the
last EmbedKernel on) is summed, kernels are grouped by name with their launches, numbers with
thousands separators parse, other metrics and the program's own output are ignored.

Run from the repository root: /usr/bin/python3 -m unittest tests/loadtest/test_ncu_kernel_summary.py
"""

import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))

from ncu_kernel_summary import last_step, summarize  # noqa: E402

HEADER = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'


def row(i, name, ns, metric="gpu__time_duration.sum"):
    return f'"{i}","{name}","{metric}","ns","{ns}"\n'


class NcuKernelSummaryTest(unittest.TestCase):
    def test_the_last_step_grouped_by_kernel(self):
        lines = ["== decode steps ==\n", HEADER,
                 row(0, "EmbedKernel(...)", "4,000"), row(1, "GemvKernel<1>", "9,999"),
                 row(2, "EmbedKernel(...)", "4,100"), row(3, "GemvKernel<1>", "5,500"),
                 row(4, "LayerNormKernel", "3,000"), row(5, "GemvKernel<1>", "6,500"),
                 row(6, "GemvKernel<1>", "1", metric="sm__cycles_elapsed.avg"),
                 "wrote out.json\n"]
        step = last_step(lines)
        self.assertEqual(len(step), 4)
        self.assertEqual(summarize(step), [("GemvKernel<1>", 2, 12000.0),
                                           ("EmbedKernel(...)", 1, 4100.0),
                                           ("LayerNormKernel", 1, 3000.0)])

    def test_no_decode_step_is_an_error(self):
        with self.assertRaises(ValueError):
            last_step([HEADER, row(0, "GemvKernel<1>", "10")])


if __name__ == "__main__":
    unittest.main()
