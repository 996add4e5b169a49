"""models/quality_table.py: rows, budgets and the report, without training anything.

Run: /usr/bin/python3 -m unittest discover -s models/tests
"""

import argparse
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import quality_table as qt  # noqa: E402
import train  # noqa: E402


def args_for(out, **overrides):
    args = argparse.Namespace(out=Path(out), lm_tokens=1228800, mt_tokens=614400, jobs=2, python="/usr/bin/python3")
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


class Rows(unittest.TestCase):
    def test_every_fixed_row_has_a_preset(self):
        presets = train.presets()
        for row in qt.LM_ROWS + qt.MT_ROWS:
            if row.convert_from:
                self.assertIn(row.convert_from, [r.name for r in qt.LM_ROWS])
            else:
                self.assertIn(row.preset, presets, row.name)
                self.assertEqual(presets[row.preset][1].task, row.task, row.name)

    def test_noise_rows_are_softmax_and_abc_in_both_tasks(self):
        noisy = {r.name for r in qt.LM_ROWS + qt.MT_ROWS if r.noise}
        self.assertEqual(noisy, {"softmax", "abc", "mt-softmax", "mt-abc"})
        row = qt.LM_ROWS[0]
        self.assertEqual(qt.run_names(row), [("softmax", 1234), ("softmax.seed1235", 1235)])

    def test_optional_rows_only_with_their_presets(self):
        names = {r.name for r in qt.all_rows({})}
        self.assertNotIn("txl", names)
        names = {r.name for r in qt.all_rows({"lm-txl": None})}
        self.assertIn("txl", names)


class Budget(unittest.TestCase):
    def test_lm_budget_is_steps_of_whole_batches_and_t2r_a_quarter(self):
        args = args_for("/tmp/q", lm_tokens=1228800 + 5)
        softmax = qt.LM_ROWS[0]
        t2r = next(r for r in qt.LM_ROWS if r.convert_from)
        self.assertEqual(qt.budget_args(softmax, args), ["--steps", "1200"])
        self.assertEqual(qt.budget_args(t2r, args), ["--steps", "300"])
        self.assertEqual(qt.budget_key(t2r, args), {"lm_tokens": 307200})
        cmd = qt.train_command(t2r, "t2r", 1234, args)
        self.assertIn("convert.py", cmd[1])
        self.assertEqual(cmd[cmd.index("--from") + 1], "/tmp/q/softmax")

    def test_mt_budget_is_target_tokens(self):
        args = args_for("/tmp/q", mt_tokens=1000)
        cmd = qt.train_command(qt.MT_ROWS[1], "mt-abc.seed1235", 1235, args)
        self.assertEqual(cmd[cmd.index("--max-tokens") + 1], "1000")
        self.assertEqual(cmd[cmd.index("--seed") + 1], "1235")
        self.assertEqual(cmd[cmd.index("--threads") + 1], "1")

    def test_train_config_accepts_the_token_budget(self):
        args = train.parse_args(["--preset", "mt-abc", "--out", "x", "--max-tokens", "1000"])
        self.assertEqual(args.max_tokens, 1000)


class Report(unittest.TestCase):
    def test_spreads_and_table(self):
        def lm(ppl):
            return {"test_ppl": ppl, "valid_ppl": ppl + 1, "tokens": 1228800, "train_seconds": 60, "state": "1 bytes fixed"}

        def mt(bleu):
            scores = {"bleu": bleu, "chrf": 2 * bleu}
            return {"greedy": scores, "beam4": scores, "tokens": 1000, "train_seconds": 60, "state": "2 bytes fixed"}

        evals = {"softmax": lm(100.0), "softmax.seed1235": lm(103.0), "abc": lm(110.0), "abc.seed1235": lm(108.5),
                 "elu": lm(130.0), "mt-softmax": mt(10.0), "mt-softmax.seed1235": mt(10.5)}
        rows = [qt.LM_ROWS[0], qt.LM_ROWS[3], next(r for r in qt.LM_ROWS if r.name == "elu"), qt.MT_ROWS[0]]
        with tempfile.TemporaryDirectory() as out:
            text = qt.report(rows, evals, {"softmax": {"1": 1000.0, "64": 5000.0}}, args_for(out), 3600)
            results = qt.load_json(Path(out) / "results.json")
        self.assertAlmostEqual(results["lm_spread_between_rows"], 30.0)
        self.assertEqual(results["lm_seed_spread"], [3.0, 1.5])
        self.assertEqual(results["mt_seed_spread"], [0.5])
        self.assertIn("| softmax | 100.0 | 103.0 (seed 1235), spread 3.0 |", text)
        self.assertIn("1,000 / 5,000", text)
        self.assertIn("wall time 60 min", text)


if __name__ == "__main__":
    unittest.main()
