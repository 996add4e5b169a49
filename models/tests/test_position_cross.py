"""abc control `position` (Linformer) in cross attention and encoder self attention (issue 15):
the direct (parallel) form equals the recurrent / slot-wise form in float64, each stack's own
table, the source limit, config validation and export (models/FORMAT.md)."""

import sys
import tempfile
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import ConfigError, LayerSpec, ModelConfig, build_model, export, load  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402

SOFTMAX = {"type": "softmax"}
CROSS = {"type": "abc", "slots": 5, "control": "position", "max_positions": 16}
ENCODER = {"type": "abc", "slots": 3, "control": "position", "max_positions": 24}
DECODER = {"type": "abc", "slots": 4, "control": "position", "max_positions": 48}


def encdec(encoder_specs, pairs):
    return ModelConfig(
        vocab_size=96, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
        encoder_layers=[LayerSpec(AttentionSpec(**s)) for s in encoder_specs],
        decoder_layers=[LayerSpec(AttentionSpec(**s), AttentionSpec(**c)) for s, c in pairs],
    )


def max_diff(a, b):
    return (a - b).abs().max().item()


class CrossPositionTest(unittest.TestCase):
    src = torch.randint(4, 96, (2, 11), generator=torch.Generator().manual_seed(4))
    tokens = torch.randint(4, 96, (2, 30), generator=torch.Generator().manual_seed(3))

    def model(self, config=None):
        return build_model(config or encdec([SOFTMAX], [(SOFTMAX, CROSS), (DECODER, CROSS)]), seed=7).double()

    def test_memory_is_the_table_times_the_source(self):
        """K~ = W[:, :M] K_src, V~ = W[:, :M] V_src, written out per slot."""
        model = self.model()
        cross = model.decoder.layers[0].cross
        enc_out = torch.randn(2, 9, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            memory = cross.memory(enc_out)
            w = model.decoder.cross_linformer.weight[:, :9]  # [n, M]
            k = cross._heads(cross.k(enc_out))  # [B, H, M, dh]
            v = cross._heads(cross.v(enc_out))
        for j in range(5):
            expected_k = (w[j][None, None, :, None] * k).sum(2)
            expected_v = (w[j][None, None, :, None] * v).sum(2)
            self.assertLess(max_diff(memory["K"][:, :, j], expected_k), 1e-12)
            self.assertLess(max_diff(memory["V"][:, :, j], expected_v), 1e-12)

    def test_folded_one_position_at_a_time_equals_memory(self):
        cross = self.model().decoder.layers[1].cross
        enc_out = torch.randn(2, 13, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        x = torch.randn(2, 6, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            memory = cross.init_memory(2)
            for m in range(enc_out.shape[1]):
                memory = cross.fold(memory, enc_out[:, m])
            direct = cross.memory(enc_out)
            self.assertLess(max_diff(memory["K"], direct["K"]), 1e-12)
            self.assertLess(max_diff(memory["V"], direct["V"]), 1e-12)
            parallel = cross(x, direct)
            recurrent = torch.stack([cross.step(x[:, t], memory) for t in range(x.shape[1])], dim=1)
        self.assertLess(max_diff(parallel, recurrent), 1e-12)

    def test_parallel_equals_recurrent_model(self):
        model = self.model()
        with torch.no_grad():
            parallel = model(self.src, self.tokens)
            state = model.init_state(model.encode(self.src))
            out = []
            for t in range(self.tokens.shape[1]):
                logits, state = model.step(self.tokens[:, t], state)
                out.append(logits)
        self.assertLess(max_diff(parallel, torch.stack(out, dim=1)), 1e-10)

    def test_state_fixed_size_and_table_shared(self):
        model = self.model()
        self.assertEqual(list(model.decoder.cross_linformer.weight.shape), [5, 16])
        self.assertIs(model.decoder.layers[0].cross.linformer, model.decoder.layers[1].cross.linformer)
        self.assertIsNot(model.decoder.layers[1].cross.linformer, model.decoder.linformer)
        cross = model.decoder.layers[0].cross
        for length in (1, 16):
            with torch.no_grad():
                memory = cross.memory(torch.randn(1, length, 32, dtype=torch.float64))
            self.assertEqual(tuple(memory["K"].shape), (1, 4, 5, 8))
            self.assertEqual(tuple(memory["V"].shape), (1, 4, 5, 8))

    def test_source_longer_than_table_refused(self):
        model = self.model()
        self.assertEqual(model.config.max_source_positions, 16)
        with self.assertRaisesRegex(ValueError, "max_positions 16"):
            model(torch.randint(4, 96, (1, 17)), self.tokens[:1, :3])


class EncoderPositionTest(unittest.TestCase):
    src = torch.randint(4, 96, (2, 20), generator=torch.Generator().manual_seed(5))

    def test_direct_equals_slot_wise(self):
        """Bidirectional Linformer: every position reads K~ = W[:, :L] K over the whole source."""
        model = build_model(encdec([ENCODER, SOFTMAX, ENCODER], [(SOFTMAX, SOFTMAX)]), seed=8).double()
        attn = model.encoder.layers[0].attn
        self.assertFalse(attn.causal)
        x = torch.randn(2, 20, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
        with torch.no_grad():
            direct, slot_wise = attn(x), attn.forward_recurrent(x)
            # Written out: softmax over the n slots of K~ q, K~ = W[:, :L] K.
            w = model.encoder.linformer.weight[:, :20]
            q, k, v = attn._query(x), attn._heads(attn.k(x)), attn._heads(attn.v(x))
            keys, values = torch.einsum("nm,bhmd->bhnd", w, k), torch.einsum("nm,bhmd->bhnd", w, v)
            explicit = attn._output(torch.softmax(q @ keys.transpose(-1, -2), dim=-1) @ values)
        self.assertLess(max_diff(direct, slot_wise), 1e-12)
        self.assertLess(max_diff(direct, explicit), 1e-12)
        self.assertIs(model.encoder.layers[0].attn.linformer, model.encoder.layers[2].attn.linformer)
        self.assertEqual(list(model.encoder.linformer.weight.shape), [3, 24])

    def test_every_position_reads_the_whole_source(self):
        """Bidirectional: changing the last source token changes the first position's output."""
        model = build_model(encdec([ENCODER], [(SOFTMAX, SOFTMAX)]), seed=8).double()
        changed = self.src.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 90 + 4
        with torch.no_grad():
            a, b = model.encode(self.src), model.encode(changed)
        self.assertGreater(max_diff(a[:, 0], b[:, 0]), 1e-6)

    def test_source_limit_is_the_smallest_table(self):
        config = encdec([ENCODER], [(SOFTMAX, CROSS)])
        self.assertEqual(config.max_source_positions, 16)
        self.assertEqual(encdec([ENCODER], [(SOFTMAX, SOFTMAX)]).max_source_positions, 24)
        self.assertEqual(encdec([SOFTMAX], [(DECODER, SOFTMAX)]).max_source_positions, 0)
        model = build_model(encdec([ENCODER], [(SOFTMAX, SOFTMAX)]))
        with self.assertRaisesRegex(ValueError, "max_positions 24"):
            model.encode(torch.randint(4, 96, (1, 25)))


class ConfigAndExportTest(unittest.TestCase):
    def test_validation_names_the_field(self):
        cases = {
            r"decoder_layers\[1\].cross_attention: .*cross_linformer": encdec([SOFTMAX], [(SOFTMAX, CROSS), (SOFTMAX, dict(CROSS, max_positions=8))]),
            r"decoder_layers\[1\].cross_attention: .*same slots": encdec([SOFTMAX], [(SOFTMAX, CROSS), (SOFTMAX, dict(CROSS, slots=2))]),
            r"encoder_layers\[1\].attention: .*same slots and max_positions": encdec([ENCODER, dict(ENCODER, max_positions=8)], [(SOFTMAX, SOFTMAX)]),
            r"decoder_layers\[0\].cross_attention: 'max_positions'": encdec([SOFTMAX], [(SOFTMAX, {"type": "abc", "slots": 2, "control": "position"})]),
            r"encoder_layers\[0\].attention: 'max_positions'": encdec([{"type": "abc", "slots": 2, "control": "position", "max_positions": 0}], [(SOFTMAX, SOFTMAX)]),
        }
        for pattern, config in cases.items():
            with self.subTest(pattern), self.assertRaisesRegex(ConfigError, pattern):
                config.validate()
        # Tables of different sizes in different stacks are fine: each has its own.
        encdec([ENCODER], [(DECODER, CROSS)]).validate()

    def test_export_round_trip(self):
        config = encdec([ENCODER, SOFTMAX], [(DECODER, CROSS), (SOFTMAX, CROSS)])
        model = build_model(config, seed=1)
        names = set(model.state_dict())
        for name in ("encoder.linformer.weight", "decoder.linformer.weight", "decoder.cross_linformer.weight"):
            self.assertIn(name, names)
        self.assertFalse(any(".control." in n for n in names))
        src = torch.randint(4, 96, (1, 12), generator=torch.Generator().manual_seed(1))
        tokens = torch.randint(4, 96, (1, 9), generator=torch.Generator().manual_seed(2))
        with tempfile.TemporaryDirectory() as tmp:
            export(model, config, tmp, dtype="float32")
            loaded = load(tmp)
            written = (Path(tmp) / "config.json").read_text()
        with torch.no_grad():
            self.assertTrue(torch.equal(model(src, tokens), loaded(src, tokens)))
        self.assertIn('"max_positions": 16', written)
        self.assertIn('"max_positions": 24', written)


if __name__ == "__main__":
    unittest.main()
