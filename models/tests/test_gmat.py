"""GMAT encoder (Gupta & Berant 2020): chunked == dense masked form, the mask, padding, config errors.

Run from the repository root: /usr/bin/python3 -m unittest discover -s models/tests
"""

import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import ConfigError, LayerSpec, ModelConfig, build_model  # noqa: E402
from abcd_ref.config import AttentionSpec, GmatSpec  # noqa: E402
from abcd_ref.gmat import gmat_mask  # noqa: E402

SOFTMAX = {"type": "softmax"}


def gmat_config(chunk=0, memory=3, output="memory", layers=2, cross=SOFTMAX):
    return ModelConfig(
        vocab_size=64, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
        encoder_layers=[LayerSpec(AttentionSpec(type="gmat", chunk=chunk)) for _ in range(layers)],
        decoder_layers=[LayerSpec(AttentionSpec(**SOFTMAX), AttentionSpec(**cross)) for _ in range(2)],
        gmat=GmatSpec(memory=memory, output=output),
    )


class GmatFormsTest(unittest.TestCase):
    def test_chunked_equals_dense_masked_float64(self):
        for chunk in (0, 1, 3, 4, 10, 50):
            for output in ("memory", "all"):
                with self.subTest(chunk=chunk, output=output):
                    model = build_model(gmat_config(chunk=chunk, output=output), seed=chunk).double()
                    x = model._embed(torch.randint(4, 64, (2, 10)))
                    chunked, dense = model.encoder(x), model.encoder(x, dense=True)
                    self.assertEqual(chunked.shape, (2, 3 if output == "memory" else 13, 32))
                    self.assertLess((chunked - dense).abs().max().item(), 1e-12)

    def test_mask_is_eq3(self):
        mask = gmat_mask(5, 2, 2)[0]
        # main row 2 (chunk [2, 4)): rows 2, 3 and the memory rows 5, 6.
        self.assertEqual(mask[2].tolist(), [False, False, True, True, False, True, True])
        # main row 4: its own chunk [4, 5) and memory.
        self.assertEqual(mask[4].tolist(), [False, False, False, False, True, True, True])
        # memory rows see everything.
        self.assertTrue(mask[5:].all())
        self.assertTrue(gmat_mask(5, 2, 0)[0].all())  # chunk 0: full attention

    def test_chunks_only_interact_through_memory(self):
        """With chunk C, a source token's change reaches another chunk's rows only via memory."""
        model = build_model(gmat_config(chunk=4, output="all", layers=1), seed=3).double()
        src = torch.randint(4, 64, (1, 8))
        changed = src.clone()
        changed[0, 0] = 4 if src[0, 0] != 4 else 5
        a, b = model.encoder(model._embed(src)), model.encoder(model._embed(changed))
        self.assertGreater((a[0, 1:4] - b[0, 1:4]).abs().max().item(), 1e-6)  # same chunk: direct
        self.assertGreater((a[0, 8:] - b[0, 8:]).abs().max().item(), 1e-6)  # memory sees all
        # One layer: the other chunk reads memory keys of layer 0 (the learned embeddings), so it
        # is unchanged.
        self.assertLess((a[0, 4:8] - b[0, 4:8]).abs().max().item(), 1e-12)

    def test_padding_is_never_attended(self):
        model = build_model(gmat_config(chunk=3), seed=5).double()
        src = torch.randint(4, 64, (1, 7))
        padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
        key_mask = torch.arange(10)[None] < 7
        plain = model.encoder(model._embed(src))
        for dense in (False, True):
            masked = model.encoder(model._embed(padded), key_mask=key_mask, dense=dense)
            self.assertLess((plain - masked).abs().max().item(), 1e-12)

    def test_memory_output_is_fixed_in_source_length(self):
        model = build_model(gmat_config(memory=5), seed=1)
        for length in (1, 16, 200):
            self.assertEqual(model.encode(torch.randint(4, 64, (1, length))).shape, (1, 5, 32))

    def test_decoder_parallel_equals_recurrent(self):
        for cross in (SOFTMAX, {"type": "abc", "slots": 3}):
            model = build_model(gmat_config(chunk=2, cross=cross), seed=7).double()
            src, tokens = torch.randint(4, 64, (1, 9)), torch.randint(4, 64, (1, 6))
            parallel = model(src, tokens)[0]
            state = model.init_state(model.encode(src))
            for t in range(6):
                logits, state = model.step(tokens[:, t], state)
                self.assertLess((logits[0] - parallel[t]).abs().max().item(), 1e-10)


class GmatConfigTest(unittest.TestCase):
    def check_error(self, text, fragment):
        with self.assertRaises(ConfigError) as caught:
            ModelConfig.from_dict(text)
        self.assertIn(fragment, str(caught.exception))

    def base(self):
        return gmat_config().to_dict()

    def test_round_trip(self):
        d = self.base()
        self.assertEqual(ModelConfig.from_dict(d).to_dict(), d)
        self.assertEqual(d["encoder_layers"][0]["attention"], {"type": "gmat", "chunk": 0})

    def test_no_causal_gmat(self):
        d = self.base()
        d["decoder_layers"][1]["attention"] = {"type": "gmat", "chunk": 0}
        self.check_error(d, "decoder_layers[1].attention: type 'gmat' is only allowed in encoder_layers (there is no causal GMAT)")
        d = self.base()
        d["decoder_layers"][0]["cross_attention"] = {"type": "gmat"}
        self.check_error(d, "decoder_layers[0].cross_attention: type 'gmat'")

    def test_field_errors(self):
        cases = [
            (("gmat", "memory"), 0, "gmat: 'memory' must be an integer >= 1"),
            (("gmat", "output"), "hidden", "gmat: 'output' must be one of"),
            (("gmat", "memory_only_layers"), 1, "gmat: 'memory_only_layers' must be 0"),
        ]
        for (outer, key), value, fragment in cases:
            d = self.base()
            d[outer][key] = value
            self.check_error(d, fragment)
        d = self.base()
        d["encoder_layers"][0]["attention"]["chunk"] = -1
        self.check_error(d, "encoder_layers[0].attention: 'chunk' must be an integer >= 0")
        d = self.base()
        d["encoder_layers"][1]["attention"] = SOFTMAX
        self.check_error(d, "encoder_layers[1].attention: every encoder layer must be 'gmat'")
        d = self.base()
        del d["gmat"]
        self.check_error(d, "encoder_layers[0].attention: type 'gmat' needs the model-level 'gmat' object")
        d = self.base()
        d["gmat"] = {"output": "memory"}
        self.check_error(d, "gmat: 'memory' is required")
        d = self.base()
        d["encoder_layers"][0]["attention"] = {"type": "softmax", "chunk": 4}
        self.check_error(d, "not valid for type 'softmax'")
        d = self.base()
        d["decoder_layers"][0]["cross_attention"] = {"type": "abc", "slots": 2, "control": "position", "max_positions": 8}
        self.check_error(d, "decoder_layers[0].cross_attention.control: 'position' reads source positions")


if __name__ == "__main__":
    unittest.main()
