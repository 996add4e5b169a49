"""Fast checks of train.py's Transformer-XL options (no training is run): Dai's segment order,
segment recurrence == one pass over the concatenated segments, SCTXL skip-retain and stochastic
cross-head attention, option validation.

Run: /usr/bin/python3 -m unittest discover -s models/tests
"""

import random
import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train  # noqa: E402
from abcd_ref import AttentionSpec, LayerSpec, ModelConfig, build_model  # noqa: E402


def txl_config(layers=3, memory=5, positional="none", **fields):
    spec = {"type": "txl", "memory": memory, "clamp_len": 4}
    return ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, positional=positional,
                       decoder_layers=[LayerSpec(AttentionSpec(**spec)) for _ in range(layers)], **fields)


class TxlTraining(unittest.TestCase):
    def test_segments_are_contiguous_streams(self):
        stream = list(range(1000))
        segments = train.lm_segments(stream, batch_size=3, seq_len=10)
        self.assertEqual(tuple(segments.shape[1:]), (3, 11))
        part = 999 // 3
        for s in range(len(segments) - 1):
            for b in range(3):
                self.assertEqual(int(segments[s, b, 0]), b * part + s * 10)
                self.assertEqual(int(segments[s + 1, b, 0]), int(segments[s, b, -1]))

    def test_skip_probabilities(self):
        self.assertEqual(train.skip_probabilities(4), [0.0, 0.125, 0.25, 0.0])

    def test_recurrence_equals_one_pass(self):
        for norm in ("pre", "post"):
            with self.subTest(norm):
                model = build_model(txl_config(norm=norm), seed=3).double().eval()
                tokens = torch.randint(0, 50, (2, 25), generator=torch.Generator().manual_seed(1))
                with torch.no_grad():
                    one_pass, count = train.lm_loss(model, tokens)
                    first, n1, memories = train.txl_segment_loss(model, tokens[:, :13], [None] * 3)
                    second, n2, _ = train.txl_segment_loss(model, tokens[:, 12:], memories)
                self.assertEqual(n1 + n2, count)
                self.assertAlmostEqual((first + second).item(), one_pass.item(), places=9)
                self.assertEqual(memories[0][0].shape[2], 5)  # the last M keys
                self.assertFalse(memories[0][0].requires_grad)

    def test_skipped_layer_keeps_its_memory(self):
        model = build_model(txl_config(), seed=3).double().eval()
        tokens = torch.randint(0, 50, (2, 17), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            _, _, memories = train.txl_segment_loss(model, tokens[:, :9], [None] * 3)
            _, _, after = train.txl_segment_loss(model, tokens[:, 8:], memories, skip=[0.0, 1.0, 0.0], rng=random.Random(0))
        self.assertIs(after[1], memories[1])
        self.assertFalse(torch.equal(after[0][0], memories[0][0]))

    def test_cross_head_is_training_only(self):
        model = build_model(txl_config(), seed=3).double()
        tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            model.eval()
            plain = model(tokens)
            for layer in model.decoder.layers:
                layer.attn.cross_head_p = 1.0
            self.assertTrue(torch.equal(model(tokens), plain))
            model.train()
            torch.manual_seed(0)
            mixed = [model(tokens) for _ in range(4)]
        self.assertTrue(any(not torch.allclose(m, plain) for m in mixed))

    def test_trained_with_options_exports_plain_txl(self):
        """One step with skip-retain and cross-head attention: the same tensors as a plain txl model."""
        config = txl_config()
        model = build_model(config, seed=3)
        for layer in model.decoder.layers:
            layer.attn.cross_head_p = 1.0
        model.train()
        tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(4))
        loss, n, _ = train.txl_segment_loss(model, tokens, [None] * 3, skip=train.skip_probabilities(3), rng=random.Random(1))
        (loss / n).backward()
        plain = build_model(config, seed=3).state_dict()
        trained = model.state_dict()
        self.assertEqual(sorted(trained), sorted(plain))
        for name, tensor in trained.items():
            self.assertEqual(tuple(tensor.shape), tuple(plain[name].shape), name)

    def test_options_need_an_all_txl_lm(self):
        tc = train.TrainConfig(task="lm", skip_retain=True)
        self.assertTrue(train.check_txl_options(txl_config(), tc))
        self.assertFalse(train.check_txl_options(txl_config(), train.TrainConfig(task="lm", cross_head_p=0.1)))
        mixed = txl_config()
        mixed.decoder_layers[0] = LayerSpec(AttentionSpec(type="softmax"))
        with self.assertRaises(ValueError):
            train.check_txl_options(mixed, tc)
        with self.assertRaises(ValueError):
            train.check_txl_options(txl_config(positional="sinusoidal"), tc)

    def test_preset(self):
        config, tc = train.presets()["lm-txl"]
        self.assertEqual(config.positional, "none")
        self.assertEqual(config.decoder_layers[0].attention.to_dict(), {"type": "txl", "memory": 64, "clamp_len": 64})
        self.assertEqual(tc.steps, train.LM_STEPS)
        args = train.parse_args(["--preset", "lm-txl", "--skip_retain", "--cross_head_p", "0.1", "--out", "x"])
        self.assertTrue(args.skip_retain)
        self.assertEqual(args.cross_head_p, 0.1)


if __name__ == "__main__":
    unittest.main()
