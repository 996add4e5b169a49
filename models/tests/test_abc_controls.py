"""abc controls position (causal Linformer), block (compressive) and cluster (online k-means):
parallel form == recurrent form in float64, the cluster assignment rule, the block ring, the
position table's sharing and limit, config validation and export (models/FORMAT.md)."""

import sys
import tempfile
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import ConfigError, LayerSpec, ModelConfig, build_model, export, load  # noqa: E402
from abcd_ref.abc_attention import block_log_control, cluster_ids  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402

POSITION = {"type": "abc", "slots": 4, "control": "position", "max_positions": 48}
BLOCK = {"type": "abc", "slots": 3, "control": "block", "block": 4}
BLOCK1 = {"type": "abc", "slots": 2, "control": "block", "block": 1}
CLUSTER = {"type": "abc", "slots": 4, "control": "cluster"}
SOFTMAX = {"type": "softmax"}


def decoder(*specs):
    return ModelConfig(vocab_size=96, d_model=32, n_heads=4, d_ff=64, decoder_layers=[LayerSpec(AttentionSpec(**s)) for s in specs])


def encdec(encoder_specs, pairs):
    return ModelConfig(
        vocab_size=96, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
        encoder_layers=[LayerSpec(AttentionSpec(**s)) for s in encoder_specs],
        decoder_layers=[LayerSpec(AttentionSpec(**s), AttentionSpec(**c)) for s, c in pairs],
    )


def recurrent(model, tokens, src=None):
    state = model.init_state(tokens.shape[0]) if src is None else model.init_state(model.encode(src))
    out = []
    for t in range(tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
        out.append(logits)
    return torch.stack(out, dim=1)


class ParallelEqualsRecurrentTest(unittest.TestCase):
    tokens = torch.randint(4, 96, (2, 40), generator=torch.Generator().manual_seed(3))
    src = torch.randint(4, 96, (2, 11), generator=torch.Generator().manual_seed(4))

    def check(self, config, src=None):
        model = build_model(config, seed=5).double()
        with torch.no_grad():
            parallel = model(self.tokens) if src is None else model(src, self.tokens)
            self.assertLess((parallel - recurrent(model, self.tokens, src)).abs().max().item(), 1e-10)

    def test_decoder(self):
        for name, specs in {"position": (POSITION, POSITION), "block": (BLOCK, BLOCK1), "cluster": (CLUSTER, SOFTMAX, CLUSTER)}.items():
            with self.subTest(name):
                self.check(decoder(*specs))

    def test_encoder_decoder_cluster(self):
        self.check(encdec([CLUSTER, SOFTMAX], [(CLUSTER, {"type": "abc", "slots": 3, "control": "cluster"})] * 2), self.src)

    def test_decoder_position_and_block_in_encoder_decoder(self):
        self.check(encdec([SOFTMAX], [(POSITION, CLUSTER), (BLOCK, SOFTMAX)]), self.src)


class ControlRulesTest(unittest.TestCase):
    def test_cluster_empty_slots_first_then_nearest_ties_lowest(self):
        k = torch.tensor([[4.0, 0], [4, 0], [2, 0], [5, 2], [3.4, 0]], dtype=torch.float64)[None, None]
        # slot 0, slot 1 (empty first), tie -> 0 (centroid 3), nearer to 1, nearer to 0.
        self.assertEqual(cluster_ids(k, 2)[0, 0].tolist(), [0, 1, 0, 1, 0])

    def test_cluster_below_n_tokens_is_softmax_attention(self):
        """For t < n every token has its own slot: exact softmax attention (ABC-I fn 2)."""
        config = decoder({"type": "abc", "slots": 16, "control": "cluster"})
        model = build_model(config, seed=2).double()
        reference = build_model(decoder(SOFTMAX), seed=2).double()
        reference.load_state_dict(model.state_dict())
        tokens = ParallelEqualsRecurrentTest.tokens[:, :16]
        with torch.no_grad():
            self.assertLess((model(tokens) - reference(tokens)).abs().max().item(), 1e-10)

    def test_block_ring_holds_the_last_n_blocks(self):
        logits = block_log_control(7, 2, 2, "cpu")  # c = 2, n = 2
        held = lambda t, j: [i for i in range(7) if logits[t, i, j] == 0]  # noqa: E731
        self.assertEqual((held(0, 0), held(0, 1)), ([0], []))
        self.assertEqual((held(3, 0), held(3, 1)), ([0, 1], [2, 3]))
        self.assertEqual((held(4, 0), held(4, 1)), ([4], [2, 3]))  # block 2 evicted block 0
        self.assertEqual((held(6, 0), held(6, 1)), ([4, 5], [6]))

    def test_position_table_shared_and_limited(self):
        model = build_model(decoder(POSITION, SOFTMAX, POSITION))
        self.assertEqual(list(model.decoder.linformer.weight.shape), [4, 48])
        self.assertIs(model.decoder.layers[0].attn.linformer, model.decoder.layers[2].attn.linformer)
        self.assertEqual(model.config.max_positions, 48)
        self.assertEqual(decoder(CLUSTER).max_positions, 0)
        with self.assertRaises(ValueError):
            model(torch.zeros(1, 49, dtype=torch.long))


class ConfigTest(unittest.TestCase):
    def test_validation_names_the_field(self):
        cases = {
            "max_positions": [{"type": "abc", "slots": 4, "control": "position"}],
            "block": [{"type": "abc", "slots": 4, "control": "block", "block": 0}],
            "shared_control": [{"type": "abc", "slots": 4, "control": "cluster", "shared_control": True}],
            "same slots and max_positions": [POSITION, dict(POSITION, max_positions=32)],
        }
        for fragment, specs in cases.items():
            with self.subTest(fragment), self.assertRaisesRegex(ConfigError, fragment):
                decoder(*specs).validate()
        with self.assertRaisesRegex(ConfigError, "'block' is only for control 'block'"):
            ModelConfig.from_dict({**decoder(SOFTMAX).to_dict(), "decoder_layers": [{"attention": {"type": "abc", "slots": 2, "block": 3}}]})
        for bad in (BLOCK,):  # position has encoder and cross forms (test_position_cross.py)
            with self.subTest(bad["control"]), self.assertRaisesRegex(ConfigError, "only supported in decoder self"):
                encdec([bad], [(SOFTMAX, SOFTMAX)]).validate()
            with self.subTest(bad["control"] + " cross"), self.assertRaisesRegex(ConfigError, "only supported in decoder self"):
                encdec([SOFTMAX], [(SOFTMAX, bad)]).validate()

    def test_export_round_trip(self):
        config = decoder(POSITION, BLOCK, CLUSTER)
        model = build_model(config, seed=1)
        tokens = torch.randint(4, 96, (1, 20), generator=torch.Generator().manual_seed(1))
        with tempfile.TemporaryDirectory() as tmp:
            export(model, config, tmp, dtype="float32")
            loaded = load(tmp)
            written = (Path(tmp) / "config.json").read_text()
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens), loaded(tokens)))
        self.assertIn('"max_positions": 48', written)
        self.assertIn('"block": 4', written)
        names = set(model.state_dict())
        self.assertIn("decoder.linformer.weight", names)
        self.assertFalse(any(".attn.control." in n for n in names))


if __name__ == "__main__":
    unittest.main()
