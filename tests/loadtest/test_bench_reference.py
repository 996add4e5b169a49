"""bench_reference.py's StaticDecoder (the step it captures as a CUDA graph), run eagerly on the
CPU: it must give DecoderLM.step's logits step for step, start over after reset(), and refuse
models whose state changes shape (softmax, window) instead of capturing a wrong graph.

Run from the repository root: /usr/bin/python3 -m unittest tests/loadtest/test_bench_reference.py
"""

import sys
import unittest
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))
sys.path.insert(0, str(ROOT / "models"))

from abcd_ref import load  # noqa: E402
from bench_reference import StaticDecoder  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "golden"
BATCH, STEPS = 3, 12


def tokens(vocab):
    return torch.tensor([[(7 * b + 5 * t + 1) % vocab for t in range(STEPS)] for b in range(BATCH)])


class StaticDecoderTest(unittest.TestCase):
    def test_equals_the_model_step_for_bounded_states(self):
        for name in ("dec_abc", "dec_abc_shared", "dec_rfa_gaussian_gate", "dec_rfa_arccos", "dec_t2r", "dec_elu"):
            with self.subTest(name), torch.inference_mode():
                model = load(str(FIXTURES / name)).eval()
                ids = tokens(model.config.vocab_size)
                decoder = StaticDecoder(model, BATCH, STEPS)
                for attempt in range(2):  # the second after reset()
                    state = model.init_state(BATCH)
                    for t in range(STEPS):
                        expected, state = model.step(ids[:, t], state)
                        decoder.ids.copy_(ids[:, t])
                        actual = decoder.step()
                        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6, msg=f"{name} step {t}")
                    self.assertEqual(int(decoder.position), STEPS)
                    decoder.reset()
                    self.assertEqual(int(decoder.position), 0)

    def test_refuses_states_that_change_shape(self):
        for name in ("dec_softmax", "dec_window", "dec_mixed"):
            with self.subTest(name), torch.inference_mode():
                model = load(str(FIXTURES / name)).eval()
                decoder = StaticDecoder(model, BATCH, STEPS)
                with self.assertRaisesRegex(ValueError, "changes shape"):
                    for t in range(STEPS):
                        decoder.ids.copy_(tokens(model.config.vocab_size)[:, t])
                        decoder.step()


if __name__ == "__main__":
    unittest.main()
