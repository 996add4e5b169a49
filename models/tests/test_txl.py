"""Transformer-XL attention (txl) in the reference: parallel == recurrent, the score formula,
segment memory, post-LN / positional none, config validation, export names.

Run from the repository root: /usr/bin/python3 -m unittest discover -s models/tests
"""

import math
import sys
import tempfile
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import ConfigError, LayerSpec, ModelConfig, build_model, export, load  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402
from abcd_ref.txl_attention import relative_sinusoids  # noqa: E402

D_MODEL, N_HEADS = 32, 4


def txl(memory, clamp_len):
    return {"type": "txl", "memory": memory, "clamp_len": clamp_len}


def config(specs, **overrides):
    fields = dict(vocab_size=96, d_model=D_MODEL, n_heads=N_HEADS, d_ff=64,
                  decoder_layers=[LayerSpec(AttentionSpec(**s)) for s in specs])
    fields.update(overrides)
    return ModelConfig(**fields)


def recurrent_logits(model, tokens):
    state = model.init_state(tokens.shape[0])
    logits = []
    for t in range(tokens.shape[1]):
        out, state = model.step(tokens[:, t], state)
        logits.append(out)
    return torch.stack(logits, dim=1)


class TxlParityTest(unittest.TestCase):
    tokens = torch.randint(0, 96, (2, 30), generator=torch.Generator().manual_seed(3))

    def test_parallel_equals_recurrent(self):
        cases = {
            "dai": ([txl(6, 4), txl(9, 20)], dict(positional="none", norm="post")),
            "pre_sinusoidal": ([txl(5, 5), {"type": "softmax"}], {}),
            "memory_beyond_sequence": ([txl(64, 3)] * 2, dict(positional="none")),
            "memory_one": ([txl(1, 1)] * 2, dict(norm="post")),
        }
        for name, (specs, overrides) in cases.items():
            with self.subTest(name):
                model = build_model(config(specs, **overrides), seed=5)
                for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
                    model = model.to(dtype)
                    with torch.no_grad():
                        diff = (model(self.tokens) - recurrent_logits(model, self.tokens)).abs().max().item()
                    self.assertLess(diff, tol)

    def test_score_formula(self):
        """One query by the formula of Dai et al. 2019 (their Eq. for A^rel), written out with loops."""
        memory, clamp = 5, 3
        model = build_model(config([txl(memory, clamp)], positional="none"), seed=9).double()
        attn = model.decoder.layers[0].attn
        x = torch.randn(1, 12, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            heads = attn.parallel(x)  # [1, H, T, dh]
            q = attn.q(x)[0].view(12, N_HEADS, -1)
            k = attn.k(x)[0].view(12, N_HEADS, -1)
            v = attn.v(x)[0].view(12, N_HEADS, -1)
            rel = relative_sinusoids(memory + 1, D_MODEL)
            u, w = model.decoder.r_w_bias, model.decoder.r_r_bias
            dh = D_MODEL // N_HEADS
            for t in (0, 3, 11):
                for h in range(N_HEADS):
                    keys = range(max(0, t - memory), t + 1)
                    scores = []
                    for j in keys:
                        p = (attn.r.weight @ rel[min(t - j, clamp)]).view(N_HEADS, dh)[h]
                        scores.append(((q[t, h] + u[h]) @ k[j, h] + (q[t, h] + w[h]) @ p) / math.sqrt(dh))
                    weights = torch.softmax(torch.stack(scores), 0)
                    expected = sum(weights[i] * v[j, h] for i, j in enumerate(keys))
                    self.assertLess((heads[0, h, t] - expected).abs().max().item(), 1e-12)

    def test_relative_sinusoids_halves(self):
        table = relative_sinusoids(4, 8)
        w = [10000 ** (-2 * i / 8) for i in range(4)]
        for r in range(4):
            for i in range(4):
                self.assertAlmostEqual(table[r, i].item(), math.sin(r * w[i]), places=15)
                self.assertAlmostEqual(table[r, 4 + i].item(), math.cos(r * w[i]), places=15)

    def test_segment_memory_equals_one_pass(self):
        """attend(segment, memory of the previous M keys/values) == the one-pass band form."""
        memory = 7
        model = build_model(config([txl(memory, 5)], positional="none"), seed=4).double()
        attn = model.decoder.layers[0].attn
        x = torch.randn(2, 20, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            full = attn.parallel(x)
            first, k, v = attn.attend(x[:, :12])
            second, _, _ = attn.attend(x[:, 12:], k[:, :, -memory:], v[:, :, -memory:])
        self.assertLess((torch.cat([first, second], dim=2) - full).abs().max().item(), 1e-12)

    def test_post_norm_has_no_final_norm(self):
        model = build_model(config([txl(4, 4)], norm="post", positional="none"))
        names = set(model.state_dict())
        self.assertNotIn("decoder.ln_f.weight", names)
        self.assertIn("decoder.r_w_bias", names)
        self.assertIn("decoder.r_r_bias", names)
        self.assertIn("decoder.layers.0.attn.r.weight", names)
        self.assertNotIn("decoder.layers.0.attn.r.bias", names)
        self.assertEqual(tuple(model.state_dict()["decoder.r_w_bias"].shape), (N_HEADS, D_MODEL // N_HEADS))


class TxlConfigTest(unittest.TestCase):
    def test_round_trip_and_export(self):
        cfg = config([txl(6, 4)], norm="post", positional="none")
        self.assertEqual(cfg.to_dict()["norm"], "post")
        self.assertNotIn("norm", config([txl(6, 4)]).to_dict())
        model = build_model(cfg, seed=1)
        with tempfile.TemporaryDirectory() as tmp:
            export(model, cfg, tmp)
            loaded = load(tmp)
            tokens = torch.randint(0, 96, (1, 10), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                self.assertTrue(torch.equal(model(tokens), loaded(tokens)))

    def test_invalid(self):
        bad = {
            "memory": lambda: config([{"type": "txl", "clamp_len": 4}]),
            "clamp_len": lambda: config([{"type": "txl", "memory": 4, "clamp_len": 0}]),
            "positional": lambda: config([txl(4, 4)], positional="learned"),
            "norm": lambda: config([txl(4, 4)], norm="sandwich"),
            "encoder self": lambda: ModelConfig(
                vocab_size=96, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
                encoder_layers=[LayerSpec(AttentionSpec(**txl(4, 4)))],
                decoder_layers=[LayerSpec(AttentionSpec(type="softmax"), AttentionSpec(type="softmax"))]).validate(),
            "cross": lambda: ModelConfig(
                vocab_size=96, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
                encoder_layers=[LayerSpec(AttentionSpec(type="softmax"))],
                decoder_layers=[LayerSpec(AttentionSpec(type="softmax"), AttentionSpec(**txl(4, 4)))]).validate(),
        }
        for word, make in bad.items():
            with self.subTest(word):
                with self.assertRaises(ConfigError) as caught:
                    make().validate()
                self.assertIn(word, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
