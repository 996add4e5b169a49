"""Fast checks of the training code: chunked abc == masked abc form, batching conventions, convert.

No training is run (CI stays free of training). Run: /usr/bin/python3 -m unittest discover -s models/tests
"""

import math
import sys
import tempfile
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import convert  # noqa: E402
import evaluate  # noqa: E402
import train  # noqa: E402
from abcd_ref import AttentionSpec, LayerSpec, ModelConfig, build_model, export, load  # noqa: E402
from abcd_ref.abc_attention import ABCAttention  # noqa: E402


class ChunkedAbc(unittest.TestCase):
    def check(self, t, chunk, scale=1.0, slots=5, **control):
        torch.manual_seed(t * 100 + chunk)
        module = ABCAttention(32, 4, slots, **control).double()
        with torch.no_grad():
            if module.control is not None:
                module.control.weight.mul_(scale)
        x = torch.randn(2, t, 32, dtype=torch.float64, requires_grad=True)
        module.chunk = None
        reference = module(x)
        (g_ref,) = torch.autograd.grad(reference.square().sum(), x)
        module.chunk = chunk
        out = module(x)
        (g_out,) = torch.autograd.grad(out.square().sum(), x)
        torch.testing.assert_close(out, reference, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(g_out, g_ref, rtol=1e-9, atol=1e-9)
        recurrent = module.forward_recurrent(x)
        torch.testing.assert_close(out, recurrent, rtol=1e-10, atol=1e-10)

    def test_chunk_sizes(self):
        for t, chunk in ((1, 4), (7, 1), (13, 4), (16, 16), (20, 32)):
            with self.subTest(t=t, chunk=chunk):
                self.check(t, chunk)

    def test_large_control_logits(self):
        self.check(24, 8, scale=20.0)

    def test_controls_with_dead_slots(self):
        """sigmoid, relu (slots dead for a while) and random: chunked == masked == recurrent, grads too."""
        for control in ({"control": "sigmoid"}, {"control": "relu"}, {"control": "random", "seed": 3}):
            for t, chunk in ((1, 4), (13, 4), (20, 32)):
                with self.subTest(control=control["control"], t=t, chunk=chunk):
                    self.check(t, chunk, scale=2.0, slots=6, **control)

    def test_fp32_model_logits(self):
        config = ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64,
                             decoder_layers=[LayerSpec(AttentionSpec(type="abc", slots=4)) for _ in range(2)])
        model = build_model(config, seed=3)
        tokens = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(0))
        reference = model(tokens)
        train.set_abc_chunk(model, 16)
        torch.testing.assert_close(model(tokens), reference, rtol=1e-5, atol=1e-5)


class ControlPresets(unittest.TestCase):
    def test_abc_control_presets_build_and_train(self):
        """lm-abc-{sigmoid,relu,random,position,block,cluster}: build, init, a few steps on random tokens, loss finite and falling."""
        table = train.presets()
        for control in ("sigmoid", "relu", "random", "position", "block", "cluster"):
            with self.subTest(control):
                config, tc = table[f"lm-abc-{control}"]
                layer = config.decoder_layers[0].attention
                self.assertEqual((layer.type, layer.control, layer.slots), ("abc", control, 32))
                config = ModelConfig.from_dict({**config.to_dict(), "vocab_size": 64})  # small vocab: fast
                model = build_model(config, seed=1)
                train.init_for_training(model, config, tc.seed)
                train.set_abc_chunk(model, tc.abc_chunk)
                attn = model.decoder.layers[0].attn
                if control == "relu":
                    self.assertTrue(torch.equal(attn.control.bias, torch.ones_like(attn.control.bias)))
                random_modules = train.random_control_modules(model)
                self.assertEqual(len(random_modules), 4 if control == "random" else 0)
                opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
                batch = torch.randint(4, 64, (2, 33), generator=torch.Generator().manual_seed(2))
                rng = __import__("random").Random(0)
                losses = []
                for _ in range(6):
                    train.set_random_control_seeds(random_modules, rng)
                    loss, n = train.lm_loss(model, batch)
                    opt.zero_grad()
                    (loss / n).backward()
                    self.assertTrue(all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
                    opt.step()
                    losses.append(float(loss / n))
                self.assertTrue(all(math.isfinite(x) for x in losses))
                self.assertLess(losses[-1], losses[0])
                train.set_random_control_seeds(random_modules)
                if random_modules:
                    self.assertEqual(attn.seed, 1234)


class CrossAndWindowPresets(unittest.TestCase):
    def test_presets_build_and_train(self):
        """mt-{rfa,t2r,elu}-cross, mt-gmat and lm-window-dilated: build, init, a few steps, loss finite and falling."""
        table = train.presets()
        self.assertEqual(table["mt-rfa-cross"][0].decoder_layers[0].cross_attention.features, 64)
        self.assertTrue(table["mt-rfa-cross"][0].decoder_layers[0].attention.gate)
        self.assertEqual(table["lm-window-dilated"][0].decoder_layers[0].attention.dilation, 2)
        gen = torch.Generator().manual_seed(3)
        self.assertEqual(table["mt-gmat"][0].gmat.memory, 32)
        self.assertEqual(table["mt-gmat"][0].encoder_layers[0].attention.type, "gmat")
        for name in ("mt-rfa-cross", "mt-t2r-cross", "mt-elu-cross", "lm-window-dilated", "mt-gmat"):
            with self.subTest(name):
                config, tc = table[name]
                config = ModelConfig.from_dict({**config.to_dict(), "vocab_size": 64})  # small vocab: fast
                model = build_model(config, seed=1)
                train.init_for_training(model, config, tc.seed)
                opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
                if config.is_encoder_decoder:
                    src = torch.randint(4, 64, (2, 9), generator=gen)
                    dec_in = torch.randint(4, 64, (2, 7), generator=gen)
                    target = torch.randint(4, 64, (2, 7), generator=gen)
                    step_loss = lambda: train.mt_loss(model, src, dec_in, target)  # noqa: E731
                else:
                    batch = torch.randint(4, 64, (2, 80), generator=gen)
                    step_loss = lambda: train.lm_loss(model, batch)  # noqa: E731
                losses = []
                for _ in range(6):
                    loss, n = step_loss()
                    opt.zero_grad()
                    (loss / n).backward()
                    self.assertTrue(all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
                    opt.step()
                    losses.append(float(loss / n))
                self.assertTrue(all(math.isfinite(x) for x in losses))
                self.assertLess(losses[-1], losses[0])


class SlotUsageEntropy(unittest.TestCase):
    def test_hand_case(self):
        """Head 0 writes weights 1, 3 (over two tokens) to slots 0, 1 and nothing to slots 2, 3 (relu
        dead): p = (1/4, 3/4, 0, 0). Head 1 writes every slot equally: log 4. Mean over heads."""
        weights = torch.tensor([[[[1.0, 1, 0, 0], [0, 2, 0, 0]], [[0.5, 0.5, 0.5, 0.5], [1, 1, 1, 1]]]], dtype=torch.float64)  # [1, 2, 2, 4]
        head0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
        self.assertAlmostEqual(train.slot_usage_entropy(torch.log(weights)), (head0 + math.log(4)) / 2, places=12)
        # One slot takes everything: 0; a head that wrote nothing counts as 0 (not NaN).
        one = torch.log(torch.tensor([[[[0.0, 5, 0, 0]], [[0.0, 0, 0, 0]]]]))
        self.assertEqual(train.slot_usage_entropy(one), 0.0)
        # exp control logits far beyond fp32's exp range: the same p as logits shifted by -1000.
        big = torch.tensor([[[[1000.0, 1000 + math.log(3), float("-inf"), float("-inf")]]]], dtype=torch.float64)
        self.assertAlmostEqual(train.slot_usage_entropy(big), head0, places=12)

    def test_probe_in_training_step(self):
        """relu LM: the probe records one value per abc layer on an active step, in [0, log n]."""
        config, tc = train.presets()["lm-abc-relu"]
        config = ModelConfig.from_dict({**config.to_dict(), "vocab_size": 64})
        model = build_model(config, seed=1)
        train.init_for_training(model, config, tc.seed)
        probe = train.SlotUsageProbe(model)
        self.assertEqual(len(probe.modules), 4)
        batch = torch.randint(4, 64, (2, 17), generator=torch.Generator().manual_seed(2))
        train.lm_loss(model, batch)
        self.assertIsNone(probe.take())  # inactive: nothing recorded
        probe.active = True
        train.lm_loss(model, batch)
        self.assertEqual(len(probe.values), 4)
        entropy, maximum = probe.take()
        self.assertAlmostEqual(maximum, math.log(32))
        self.assertTrue(0.0 <= entropy <= maximum)
        # Sum-kernel and block controls have no write distribution to probe.
        config, _ = train.presets()["lm-abc-position"]
        self.assertEqual(train.SlotUsageProbe(build_model(config)).modules, [])


class PositionMtPreset(unittest.TestCase):
    def test_mt_abc_position_builds_and_trains(self):
        """mt-abc-position: Linformer in the encoder, cross and decoder, each table its own size."""
        config, tc = train.presets()["mt-abc-position"]
        self.assertEqual(config.encoder_layers[0].attention.control, "position")
        self.assertEqual(config.decoder_layers[0].cross_attention.control, "position")
        self.assertGreaterEqual(config.max_source_positions, tc.max_src_len)
        self.assertGreaterEqual(config.max_positions, tc.max_tgt_len)
        config = ModelConfig.from_dict({**config.to_dict(), "vocab_size": 64})
        model = build_model(config, seed=1)
        train.init_for_training(model, config, tc.seed)
        names = set(model.state_dict())
        for name in ("encoder.linformer.weight", "decoder.linformer.weight", "decoder.cross_linformer.weight"):
            self.assertIn(name, names)
        gen = torch.Generator().manual_seed(3)
        src, dec_in, target = (torch.randint(4, 64, (2, n), generator=gen) for n in (9, 7, 7))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(6):
            loss, n = train.mt_loss(model, src, dec_in, target)
            opt.zero_grad()
            (loss / n).backward()
            opt.step()
            losses.append(float(loss / n))
        self.assertTrue(all(math.isfinite(x) for x in losses))
        self.assertLess(losses[-1], losses[0])


class Data(unittest.TestCase):
    def test_mt_convention(self):
        config = ModelConfig(vocab_size=50, d_model=8, n_heads=2, d_ff=8, architecture="encoder-decoder",
                             encoder_layers=[LayerSpec(AttentionSpec(type="softmax"))],
                             decoder_layers=[LayerSpec(AttentionSpec(type="softmax"), AttentionSpec(type="softmax"))])
        examples = [([10, 11, config.eos_id], [20, 21, 22]), ([12, 13, config.eos_id], [23])]
        src, dec_in, target = train.mt_tensors(examples, [0, 1], config)
        self.assertEqual(src.tolist(), [[10, 11, 2], [12, 13, 2]])
        self.assertEqual(dec_in.tolist(), [[1, 20, 21, 22], [1, 23, 0, 0]])
        self.assertEqual(target.tolist(), [[20, 21, 22, 2], [23, 2, -100, -100]])

    def test_mt_batches_have_one_source_length(self):
        examples = [([1] * (i % 5 + 1), [2] * (i % 3)) for i in range(200)]
        tc = train.TrainConfig(task="mt", batch_size=16, batch_tokens=60)
        import random

        batches = train.mt_batches(examples, tc, None, random.Random(0))
        self.assertEqual(sorted(i for b in batches for i in b), list(range(200)))
        for b in batches:
            self.assertEqual(len({len(examples[i][0]) for i in b}), 1)
            self.assertLessEqual(len(b), 16)

    def test_lr_schedule(self):
        tc = train.TrainConfig(steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1)
        self.assertAlmostEqual(train.lr_at(0, tc), 0.1)
        self.assertAlmostEqual(train.lr_at(10, tc), 1.0)
        self.assertAlmostEqual(train.lr_at(100, tc), 0.1)
        self.assertAlmostEqual(train.lr_at(20, tc, time_progress=1.0), 0.1)


class Convert(unittest.TestCase):
    def test_softmax_to_t2r_and_abc_keep_weights(self):
        config = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32,
                             decoder_layers=[LayerSpec(AttentionSpec(type="softmax")) for _ in range(2)])
        model = build_model(config, seed=1)
        for target, extra in (("t2r", "attn.t2r.weight"), ("abc", "attn.control.weight")):
            new_config = convert.converted_config(config, AttentionSpec(type=target, features=4) if target == "t2r"
                                                  else AttentionSpec(type="abc", slots=4))
            new_model = build_model(new_config, seed=2)
            with tempfile.TemporaryDirectory() as tmp:
                export(model, config, tmp)
                copied, kept = train.copy_matching(new_model, tmp)
            self.assertEqual(sorted(copied), sorted(model.state_dict()))
            self.assertTrue(all(extra.split(".")[1] in name for name in kept), kept)
            torch.testing.assert_close(new_model.decoder.layers[1].attn.q.weight, model.decoder.layers[1].attn.q.weight)


class Evaluate(unittest.TestCase):
    def test_lm_chunks(self):
        class FakeSp:
            def encode(self, lines):
                return [[10 + len(line)] * len(line) for line in lines]

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.txt"
            path.write_text("ab\n\nabc\n", encoding="utf-8")
            chunks, n_lines = evaluate.lm_chunks(FakeSp(), path, 1, 4)
        # stream: 1 12 12 | 1 | 1 13 13 13 -> [1,12,12,1] [1,13,13,13]
        self.assertEqual(n_lines, 3)
        self.assertEqual(chunks, [[1, 12, 12, 1], [1, 13, 13, 13]])

    def test_greedy_equals_beam_1_and_beam_runs(self):
        config = ModelConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, architecture="encoder-decoder",
                             encoder_layers=[LayerSpec(AttentionSpec(type="softmax"))],
                             decoder_layers=[LayerSpec(AttentionSpec(type="abc", slots=3), AttentionSpec(type="abc", slots=4))])
        model = build_model(config, seed=4).eval()
        sources = [[5, 6, 7, 2], [8, 9, 10, 2]]
        greedy = evaluate.translate_batch(model, sources, beam=1, max_len=6)
        beam = evaluate.translate_batch(model, sources, beam=3, max_len=6)
        self.assertEqual(len(greedy), 2)
        self.assertEqual(len(beam), 2)
        for ids in greedy + beam:
            self.assertTrue(all(0 <= i < 30 and i != config.eos_id for i in ids))
            self.assertLessEqual(len(ids), 6)


if __name__ == "__main__":
    unittest.main()
