"""`abcd-bench seq2seq` (issue 15, the seeds' decode-speed figure) on the golden encoder-decoder
fixtures at tiny lengths, so the subcommand cannot rot: every model gets a point per length with
a positive rate, the state split adds up to the pool's bytes, softmax state grows with the length
while the bounded types' does not, the seeds' ratios are computed, and bad input is refused with
the flag named.

Run from the repository root with ABCD_BENCH=build/loadtest/abcd-bench:
  /usr/bin/python3 -m unittest tests/loadtest/test_seq2seq_bench.py
"""

import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = os.environ.get("ABCD_BENCH", str(ROOT / "build" / "loadtest" / "abcd-bench"))
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
MODELS = ["encdec_softmax", "encdec_abc", "encdec_rfa_cross", "encdec_t2r_cross"]


def run(*args):
    return subprocess.run([BENCH, "seq2seq", *args], capture_output=True, text=True, timeout=60)


class Seq2seqBenchTest(unittest.TestCase):
    def test_tiny_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "seq2seq.json"
            models = ",".join(str(GOLDEN / m) for m in MODELS)
            r = run("--models", models, "--lengths", "8,40", "--batch", "3", "--steps", "2", "--rounds", "1", "--json", str(out))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("step breakdown", r.stdout)
            result = json.loads(out.read_text())["seq2seq"]
        self.assertEqual(result["lengths"], [8, 40])
        self.assertEqual(result["batch"], 3)
        by_attention = {m["attention"]: m for m in result["models"]}
        self.assertEqual(sorted(by_attention), ["abc", "rfa", "softmax", "t2r"])
        for m in result["models"]:
            self.assertEqual([p["length"] for p in m["points"]], [8, 40])
            for p in m["points"]:
                self.assertGreater(p["tokens_per_s"], 0)
                self.assertAlmostEqual(p["tokens_per_s"], 3 / (p["step_ms"] / 1000), delta=1e-6 * p["tokens_per_s"])
                self.assertEqual(p["self_state_bytes"] + p["cross_state_bytes"], p["state_bytes"])
                self.assertGreater(p["cross_state_bytes"], 0)
                for part in ("self_attention_ms", "cross_attention_ms", "ffn_products_ms", "vocab_product_ms"):
                    self.assertGreater(p["breakdown"][part], 0, (m["label"], part))
        soft, rfa = by_attention["softmax"]["points"], by_attention["rfa"]["points"]
        self.assertGreater(soft[1]["self_state_bytes"], soft[0]["self_state_bytes"])
        self.assertGreater(soft[1]["cross_state_bytes"], soft[0]["cross_state_bytes"])
        self.assertEqual(rfa[1]["state_bytes"], rfa[0]["state_bytes"])
        self.assertEqual([r["ratio"] for r in result["ratios"]], ["rfa/softmax", "abc/rfa", "t2r/abc"])
        rate = {a: m["points"][0]["tokens_per_s"] for a, m in by_attention.items()}
        self.assertAlmostEqual(result["ratios"][0]["8"], rate["rfa"] / rate["softmax"], places=6)

    def test_decoder_only_model_is_refused(self):
        r = run("--models", str(GOLDEN / "dec_softmax"), "--lengths", "8")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--models", r.stderr)
        self.assertIn("not an encoder-decoder model", r.stderr)

    def test_bad_flags_name_the_flag(self):
        model = str(GOLDEN / "encdec_softmax")
        for args, flag in ((["--lengths", "0"], "--lengths"), (["--batch", "0"], "--batch"), (["--steps", "0"], "--steps")):
            r = run("--models", model, *args)
            self.assertEqual(r.returncode, 1, args)
            self.assertIn(flag, r.stderr)
        r = run("--lengths", "8")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--models", r.stderr)


if __name__ == "__main__":
    unittest.main()
