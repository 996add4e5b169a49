"""BLEU / chrF of models/metrics_mt.py on hand-computed cases (sacreBLEU default definitions)."""

import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metrics_mt import bleu_stats, chrf_stats, corpus_bleu, corpus_chrf, tokenize_13a  # noqa: E402


class Tokenize13a(unittest.TestCase):
    def test_punctuation_split(self):
        self.assertEqual(tokenize_13a("Hello, world!"), "Hello , world !")

    def test_numbers_keep_inner_period_and_comma(self):
        self.assertEqual(tokenize_13a("3.14 and 1,000."), "3.14 and 1,000 .")

    def test_dash_only_after_digit_and_apostrophe_kept(self):
        self.assertEqual(tokenize_13a("a-b 5-6 don't"), "a-b 5 - 6 don't")

    def test_entities_and_symbols(self):
        self.assertEqual(tokenize_13a("A &amp; B (x) %s"), "A & B ( x ) % s")

    def test_non_ascii_untouched(self):
        self.assertEqual(tokenize_13a("»Datei« öffnen…"), "»Datei« öffnen…")


class Bleu(unittest.TestCase):
    def test_identical_is_100(self):
        self.assertAlmostEqual(corpus_bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."])["score"], 100.0)

    def test_hand_computed_with_exp_smoothing(self):
        # hyp a b c d e / ref a b c x e: 1-grams 4/5, 2-grams 2/4, 3-grams 1/3, 4-grams 0/2.
        # exp smoothing: p4 = 100 / (2 * 2) = 25; BP = 1 (equal lengths).
        matches, totals, sys_len, ref_len = bleu_stats(["a b c d e"], ["a b c x e"])
        self.assertEqual((matches, totals, sys_len, ref_len), ([4, 2, 1, 0], [5, 4, 3, 2], 5, 5))
        expected = math.exp((math.log(80) + math.log(50) + math.log(100 / 3) + math.log(25)) / 4)
        self.assertAlmostEqual(corpus_bleu(["a b c d e"], ["a b c x e"])["score"], expected, places=9)
        self.assertAlmostEqual(expected, 42.7287, places=3)

    def test_brevity_penalty_and_clipping(self):
        # hyp "the the the the" vs ref "the cat is on the mat": clipped 1-gram matches 2/4,
        # 2..4-grams: 0/3, 0/2, 0/1 -> smoothed 100/(2*3), 100/(4*2), 100/(8*1); BP = exp(1 - 6/4).
        r = corpus_bleu(["the the the the"], ["the cat is on the mat"])
        p = [50.0, 100 / 6, 100 / 8, 100 / 8]
        expected = math.exp(1 - 6 / 4) * math.exp(sum(math.log(x) for x in p) / 4)
        self.assertAlmostEqual(r["score"], expected, places=9)
        self.assertAlmostEqual(r["bp"], math.exp(-0.5))

    def test_too_short_for_4grams_scores_zero(self):
        self.assertEqual(corpus_bleu(["the cat"], ["the cat sat"])["score"], 0.0)

    def test_corpus_level_sums_statistics(self):
        # Segment 2 alone has no 4-gram; at corpus level the counts are summed first.
        hyps, refs = ["a b c d", "x y"], ["a b c d", "x z"]
        matches, totals, sys_len, ref_len = bleu_stats(hyps, refs)
        self.assertEqual((matches, totals), ([5, 3, 2, 1], [6, 4, 2, 1]))
        expected = math.exp(sum(math.log(100 * m / t) for m, t in zip(matches, totals)) / 4)
        self.assertAlmostEqual(corpus_bleu(hyps, refs)["score"], expected, places=9)

    def test_tokenisation_applies(self):
        # "mat." vs "mat ." tokenise the same way.
        self.assertAlmostEqual(corpus_bleu(["on the mat."], ["on the mat ."])["score"], 100.0)

    def test_empty_hypothesis(self):
        self.assertEqual(corpus_bleu([""], ["a b c d"])["score"], 0.0)


class Chrf(unittest.TestCase):
    def test_identical_is_100(self):
        self.assertAlmostEqual(corpus_chrf(["Datei öffnen"], ["Datei öffnen"]), 100.0)

    def test_hand_computed(self):
        # hyp "ab", ref "abc": n=1 2/2 matched (P 1, R 2/3), n=2 1/1 (P 1, R 1/2), n>=3 no hyp n-grams.
        # P = 1, R = 7/12, chrF2 = 100 * 5 P R / (4 P + R) = 100 * 35 / 55.
        self.assertEqual(chrf_stats(["ab"], ["abc"])[:3], [[2, 3, 2], [1, 2, 1], [0, 1, 0]])
        self.assertAlmostEqual(corpus_chrf(["ab"], ["abc"]), 100 * 35 / 55, places=9)

    def test_whitespace_is_ignored(self):
        self.assertAlmostEqual(corpus_chrf(["a b c"], ["abc"]), 100.0)

    def test_no_overlap_is_zero(self):
        self.assertEqual(corpus_chrf(["xyz"], ["abc"]), 0.0)

    def test_corpus_level_sums_statistics(self):
        # "ab"/"abc" plus "x"/"x": n=1: hyp 3, ref 4, match 3; n=2: 1, 2, 1; n=3: hyp 0 -> order 2.
        p, r = 1.0, (3 / 4 + 1 / 2) / 2
        self.assertAlmostEqual(corpus_chrf(["ab", "x"], ["abc", "x"]), 100 * 5 * p * r / (4 * p + r), places=9)


if __name__ == "__main__":
    unittest.main()
