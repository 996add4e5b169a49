"""Tests of the PyTorch reference: parallel == recurrent, export round trip, safetensors, config.

Run from the repository root: /usr/bin/python3 -m unittest discover -s models/tests
"""

import json
import math
import struct
import sys
import tempfile
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import ConfigError, LayerSpec, ModelConfig, build_model, export, load  # noqa: E402
from abcd_ref.abc_attention import ABCAttention, abc_read, abc_update  # noqa: E402
from abcd_ref.attention import make_self_attention  # noqa: E402
from abcd_ref.attention_base import _causal_mask  # noqa: E402
from abcd_ref.cross_attention import make_cross_attention  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402
from abcd_ref.model import sinusoidal_positions  # noqa: E402
from abcd_ref.safetensors_io import load_file, save_file  # noqa: E402

D_MODEL, N_HEADS = 32, 4
SELF_SPECS = {
    "softmax": {"type": "softmax"},
    "window": {"type": "window", "window": 4},
    "window_dilated": {"type": "window", "window": 3, "dilation": 3},
    "abc": {"type": "abc", "slots": 4},
    "rfa_gaussian": {"type": "rfa", "features": 8, "kernel": "gaussian"},
    "rfa_gaussian_gate": {"type": "rfa", "features": 8, "kernel": "gaussian", "gate": True},
    "rfa_arccos": {"type": "rfa", "features": 8, "kernel": "arccos"},
    "rfa_arccos_gate": {"type": "rfa", "features": 8, "kernel": "arccos", "gate": True},
    "t2r": {"type": "t2r", "features": 8},
    "elu": {"type": "elu"},
    "abc_sigmoid": {"type": "abc", "slots": 4, "control": "sigmoid"},
    "abc_relu": {"type": "abc", "slots": 4, "control": "relu"},
    "abc_random": {"type": "abc", "slots": 4, "control": "random", "seed": 17},
    "abc_random_sum": {"type": "abc", "slots": 5, "control": "random", "seed": 3, "reduce": "sum"},
}
ABC_CONTROL_SPECS = ("abc_sigmoid", "abc_relu", "abc_random", "abc_random_sum")
# Feature-map cross attention (issue 15): every feature map, ungated.
LINEAR_CROSS_SPECS = ("rfa_gaussian", "rfa_arccos", "t2r", "elu")
ENCODER_TYPES = ("softmax", "abc", "rfa_gaussian", "rfa_arccos", "t2r", "elu", *ABC_CONTROL_SPECS)


def spec(fields):
    return AttentionSpec(**fields)


def decoder_config(self_specs, **overrides):
    fields = dict(vocab_size=96, d_model=D_MODEL, n_heads=N_HEADS, d_ff=64, decoder_layers=[LayerSpec(spec(s)) for s in self_specs])
    fields.update(overrides)
    return ModelConfig(**fields)


def encdec_config(encoder_specs, decoder_specs, cross_specs):
    return ModelConfig(
        vocab_size=96, d_model=D_MODEL, n_heads=N_HEADS, d_ff=64, architecture="encoder-decoder",
        encoder_layers=[LayerSpec(spec(s)) for s in encoder_specs],
        decoder_layers=[LayerSpec(spec(s), spec(c)) for s, c in zip(decoder_specs, cross_specs)],
    )


def random_module(fields, causal=True):
    """A float64 attention module with the reference's random init."""
    reference = build_model(decoder_config([fields])).double().decoder.layers[0].attn
    if causal:
        return reference
    module = make_self_attention(spec(fields), D_MODEL, N_HEADS, causal=False).double()
    module.load_state_dict(reference.state_dict())
    return module


def recurrent_logits(model, tokens, src=None):
    """Logits for every position of tokens [B, T] through the recurrent (step) form."""
    state = model.init_state(tokens.shape[0]) if src is None else model.init_state(model.encode(src))
    logits = []
    for t in range(tokens.shape[1]):
        out, state = model.step(tokens[:, t], state)
        logits.append(out)
    return torch.stack(logits, dim=1)


def max_diff(a, b):
    return (a - b).abs().max().item()


class AttentionParityTest(unittest.TestCase):
    """Each attention module: parallel form == recurrent form."""

    def test_causal_self_attention(self):
        x = torch.randn(2, 20, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        for name, fields in SELF_SPECS.items():
            with self.subTest(name), torch.no_grad():
                module = random_module(fields)
                self.assertLess(max_diff(module(x), module.forward_recurrent(x)), 1e-10)

    def test_bidirectional_self_attention(self):
        x = torch.randn(2, 15, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        for name in ENCODER_TYPES:
            with self.subTest(name), torch.no_grad():
                module = random_module(SELF_SPECS[name], causal=False)
                self.assertLess(max_diff(module(x), module.forward_recurrent(x)), 1e-10)

    def test_causal_is_causal(self):
        x = torch.randn(1, 12, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        y = x.clone()
        y[:, 8:] += 1.0
        for name, fields in SELF_SPECS.items():
            with self.subTest(name), torch.no_grad():
                module = random_module(fields)
                self.assertLess(max_diff(module(x)[:, :8], module(y)[:, :8]), 1e-12)

    def test_abc_cross_memory_equals_recurrence(self):
        torch.manual_seed(4)
        cross = make_cross_attention(spec({"type": "abc", "slots": 6}), D_MODEL, N_HEADS).double()
        enc_out = torch.randn(2, 10, D_MODEL, dtype=torch.float64)
        with torch.no_grad():
            memory = cross.memory(enc_out)
            a = cross._heads(cross.control(enc_out), 6)
            k, v = cross._heads(cross.k(enc_out)), cross._heads(cross.v(enc_out))
            zeros = torch.zeros(2, N_HEADS, 6, D_MODEL // N_HEADS, dtype=torch.float64)
            state = {"L": torch.full((2, N_HEADS, 6), -math.inf, dtype=torch.float64), "K": zeros, "V": zeros}
            for i in range(10):
                state = abc_update(state, a[:, :, i], k[:, :, i], v[:, :, i])
        self.assertLess(max_diff(memory["K"], state["K"]), 1e-12)
        self.assertLess(max_diff(memory["V"], state["V"]), 1e-12)

    def test_abc_cross_memory_every_control(self):
        """Cross memory (one parallel pass over the source) == the token-by-token recurrence."""
        enc_out = torch.randn(2, 10, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        for name in ("abc", *ABC_CONTROL_SPECS):
            with self.subTest(name), torch.no_grad():
                torch.manual_seed(10)
                cross = make_cross_attention(spec(SELF_SPECS[name]), D_MODEL, N_HEADS).double()
                if cross.control is not None:
                    cross.control.weight.mul_(3.0)  # relu: some slots stay dead for several tokens
                memory = cross.memory(enc_out)
                a = cross._log_control(enc_out)
                k, v = cross._heads(cross.k(enc_out)), cross._heads(cross.v(enc_out))
                n = cross.slots
                zeros = torch.zeros(2, N_HEADS, n, D_MODEL // N_HEADS, dtype=torch.float64)
                state = {"L": torch.full((2, N_HEADS, n), -math.inf, dtype=torch.float64), "K": zeros, "V": zeros}
                for i in range(10):
                    if cross.sums:
                        phi = a[:, :, i].exp()[..., None]
                        state = {"L": state["L"], "K": state["K"] + phi * k[:, :, i, None], "V": state["V"] + phi * v[:, :, i, None]}
                    else:
                        state = abc_update(state, a[:, :, i], k[:, :, i], v[:, :, i])
                self.assertTrue(torch.isfinite(memory["K"]).all())
                self.assertLess(max_diff(memory["K"], state["K"]), 1e-12)
                self.assertLess(max_diff(memory["V"], state["V"]), 1e-12)
                if not cross.sums:
                    self.assertTrue(torch.equal(memory["live"], state["L"] > -math.inf))

    def test_abc_never_written_slots(self):
        """A slot with log-control -inf is not written; dead slots are masked."""
        zeros = torch.zeros(1, 1, 3, 2, dtype=torch.float64)
        state = {"L": torch.full((1, 1, 3), -math.inf, dtype=torch.float64), "K": zeros, "V": zeros}
        k = torch.tensor([[[1.0, 2.0]]], dtype=torch.float64)
        v = torch.tensor([[[3.0, 4.0]]], dtype=torch.float64)
        state = abc_update(state, torch.tensor([[[0.0, -math.inf, -math.inf]]], dtype=torch.float64), k, v)
        self.assertFalse(torch.isnan(state["K"]).any() or torch.isnan(state["V"]).any())
        self.assertEqual(state["L"].tolist(), [[[0.0, -math.inf, -math.inf]]])
        self.assertEqual(state["V"][0, 0].tolist(), [[3.0, 4.0], [0.0, 0.0], [0.0, 0.0]])
        q = torch.tensor([[[5.0, -5.0]]], dtype=torch.float64)
        live = state["L"] > -math.inf
        self.assertEqual(abc_read(q, state["K"], state["V"], live).tolist(), [[[3.0, 4.0]]])
        dead = torch.zeros_like(live)
        self.assertEqual(abc_read(q, state["K"], state["V"], dead).tolist(), [[[0.0, 0.0]]])

    def test_relu_dead_slots_in_every_form(self):
        """ReLU control with every logit negative for the first tokens: out = 0 there, no NaN."""
        x = torch.randn(1, 12, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
        module = ABCAttention(D_MODEL, N_HEADS, slots=4, control="relu").double()
        with torch.no_grad():
            module.control.weight.zero_()
            module.control.weight[:, 0] = 1.0  # a = x[0]: dead while x[0] <= 0
            module.control.bias.zero_()
            x[0, :4, 0] = -1.0
            x[0, 4:, 0] = x[0, 4:, 0].abs() + 0.1
            outs = {"masked": module(x), "recurrent": module.forward_recurrent(x)}
            module.chunk = 3
            outs["chunked"] = module(x)
        for name, out in outs.items():
            with self.subTest(name):
                self.assertTrue(torch.isfinite(out).all())
                expected_zero = module.o.bias.expand(4, -1)  # o(0) = bias for the dead tokens
                self.assertLess(max_diff(out[0, :4], expected_zero), 1e-12)
                self.assertLess(max_diff(out, outs["masked"]), 1e-10)

    def test_abc_extreme_control_logits(self):
        """Control logits around +-80 (and beyond): the recurrence stays finite and exact."""
        x = torch.randn(2, 24, D_MODEL, generator=torch.Generator().manual_seed(5))
        for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
            with self.subTest(dtype=dtype), torch.no_grad():
                module = ABCAttention(D_MODEL, N_HEADS, slots=4).to(dtype)
                module.control.weight.normal_(std=80 / math.sqrt(D_MODEL))
                module.control.bias.copy_(80 * torch.tensor([1.0, -1.0]).repeat(8))
                a = module._control_logits(x.to(dtype))
                self.assertGreater(a.abs().max().item(), 80)
                parallel, recurrent = module(x.to(dtype)), module.forward_recurrent(x.to(dtype))
                self.assertTrue(torch.isfinite(recurrent).all())
                self.assertLess(max_diff(parallel, recurrent), tol)


class LinearCrossTest(unittest.TestCase):
    """rfa / t2r / elu cross attention (thesis Alg. 5): parallel form == recurrent form, float64."""

    def module(self, name):
        reference = build_model(encdec_config([SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]], [SELF_SPECS[name]]), seed=11)
        return reference.double().decoder.layers[0].cross

    def test_parallel_equals_recurrent(self):
        enc_out = torch.randn(2, 10, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
        x = torch.randn(2, 7, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
        for name in LINEAR_CROSS_SPECS:
            with self.subTest(name), torch.no_grad():
                cross = self.module(name)
                parallel = cross(x, cross.memory(enc_out))
                # The recurrent form: the source folded in one position at a time, then one read per query.
                memory = cross.init_memory(2)
                for m in range(enc_out.shape[1]):
                    memory = cross.fold(memory, enc_out[:, m])
                folded = cross.memory(enc_out)
                self.assertLess(max_diff(memory["S"], folded["S"]), 1e-12)
                self.assertLess(max_diff(memory["z"], folded["z"]), 1e-12)
                recurrent = torch.stack([cross.step(x[:, t], memory) for t in range(x.shape[1])], dim=1)
                self.assertLess(max_diff(parallel, recurrent), 1e-10)

    def test_state_is_fixed_size(self):
        """S [B, H, F, dh] and z [B, H, F] whatever the source length."""
        for name in LINEAR_CROSS_SPECS:
            cross = self.module(name)
            f = cross.feature_count()
            for length in (1, 64):
                with torch.no_grad():
                    memory = cross.memory(torch.randn(1, length, D_MODEL, dtype=torch.float64))
                self.assertEqual(tuple(memory["S"].shape), (1, N_HEADS, f, D_MODEL // N_HEADS))
                self.assertEqual(tuple(memory["z"].shape), (1, N_HEADS, f))

    def test_gated_cross_refused(self):
        with self.assertRaises(ConfigError):
            encdec_config([SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]], [SELF_SPECS["rfa_gaussian_gate"]]).validate()


class DilatedWindowTest(unittest.TestCase):
    def test_mask_positions(self):
        """Query t sees t, t - d, ..., t - (n - 1) d (those >= 0), nothing else."""
        module = random_module(SELF_SPECS["window_dilated"])  # n = 3, d = 3
        t = 12
        mask = _causal_mask(t, "cpu", module.window, module.dilation)
        for query in range(t):
            allowed = {query - 3 * j for j in range(3) if query - 3 * j >= 0}
            self.assertEqual({i for i in range(t) if mask[query, i]}, allowed)

    def test_ring_length(self):
        """The recurrent state keeps the last (n - 1) d + 1 keys, however long the sequence."""
        module = random_module(SELF_SPECS["window_dilated"])
        state = module.init_state(1)
        with torch.no_grad():
            for _ in range(20):
                _, state = module.step(torch.randn(1, D_MODEL, dtype=torch.float64), state)
        self.assertEqual(state["k"].shape[2], 7)


class ModelParityTest(unittest.TestCase):
    """Whole models: parallel logits == recurrent (step) logits."""

    tokens = torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(6))
    src = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(7))

    def check(self, config, src=None):
        model = build_model(config, seed=8)
        for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
            model = model.to(dtype)
            with torch.no_grad():
                args = (self.tokens,) if src is None else (src, self.tokens)
                self.assertLess(max_diff(model(*args), recurrent_logits(model, self.tokens, src)), tol)

    def test_decoder_every_type(self):
        for name, fields in SELF_SPECS.items():
            with self.subTest(name):
                self.check(decoder_config([fields, fields]))

    def test_decoder_shared_control_and_mixed(self):
        shared = {"type": "abc", "slots": 4, "shared_control": True}
        config = decoder_config([shared, SELF_SPECS["softmax"], shared], activation="relu", tie_embeddings=False)
        self.check(config)
        model = build_model(config).double()
        for layer in (0, 2):
            self.assertIs(model.decoder.layers[layer].attn.shared_control, model.decoder.shared_control)
        self.assertEqual(model.decoder.shared_control.weight.dtype, torch.float64)

    def test_encoder_decoder(self):
        abc = SELF_SPECS["abc"]
        softmax = SELF_SPECS["softmax"]
        cases = {
            "softmax": ([softmax] * 2, [softmax] * 2, [softmax] * 2),
            "abc": ([softmax] * 2, [abc] * 2, [{"type": "abc", "slots": 6}] * 2),
            "mixed": (
                [abc, SELF_SPECS["elu"], {"type": "abc", "slots": 4, "shared_control": True}],
                [SELF_SPECS["t2r"], SELF_SPECS["rfa_gaussian_gate"]],
                [softmax, abc],
            ),
            **{
                f"{name} cross": ([softmax], [SELF_SPECS["rfa_gaussian_gate"]], [SELF_SPECS[name]])
                for name in LINEAR_CROSS_SPECS
            },
            "abc controls": (
                [SELF_SPECS["abc_relu"], SELF_SPECS["abc_random"]],
                [SELF_SPECS["abc_sigmoid"], SELF_SPECS["abc_random_sum"]],
                [SELF_SPECS["abc_random"], SELF_SPECS["abc_relu"]],
            ),
        }
        for name, specs in cases.items():
            with self.subTest(name):
                self.check(encdec_config(*specs), self.src)


class ExportTest(unittest.TestCase):
    def round_trip(self, config, src=None, dtype="float32"):
        model = build_model(config, seed=9)
        tokens = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(10))
        with tempfile.TemporaryDirectory() as tmp:
            export(model, config, tmp, dtype=dtype)
            loaded = load(tmp)
            written = json.loads((Path(tmp) / "config.json").read_text())
        args = (tokens,) if src is None else (src, tokens)
        with torch.no_grad():
            return model(*args), loaded(*args), written, model, loaded

    def test_decoder_round_trip_identical(self):
        layers = [SELF_SPECS[n] for n in ("abc", "rfa_gaussian_gate", "t2r", "elu", "window")]
        layers.append({"type": "abc", "slots": 3, "shared_control": True})
        before, after, written, *_ = self.round_trip(decoder_config(layers, tie_embeddings=False))
        self.assertTrue(torch.equal(before, after))
        self.assertEqual(written["decoder_layers"][1]["attention"]["eps"], 1e-2)
        self.assertEqual(written["decoder_layers"][2]["attention"]["eps"], 1e-6)
        self.assertEqual(written["layer_norm_eps"], 1e-5)

    def test_abc_control_round_trip(self):
        """Every control round-trips; random writes no control tensor (nothing to learn)."""
        layers = [SELF_SPECS[n] for n in ABC_CONTROL_SPECS]
        before, after, written, model, _ = self.round_trip(decoder_config(layers))
        self.assertTrue(torch.equal(before, after))
        self.assertEqual(written["decoder_layers"][1]["attention"]["control"], "relu")
        self.assertEqual(written["decoder_layers"][3]["attention"]["reduce"], "sum")
        names = set(model.state_dict())
        self.assertIn("decoder.layers.1.attn.control.weight", names)
        self.assertFalse(any(n.startswith(("decoder.layers.2.attn.control", "decoder.layers.3.attn.control")) for n in names))

    def test_encoder_decoder_round_trip_identical(self):
        abc = SELF_SPECS["abc"]
        config = encdec_config([abc, SELF_SPECS["softmax"]], [abc, SELF_SPECS["elu"]], [abc, SELF_SPECS["softmax"]])
        before, after, *_ = self.round_trip(config, src=ModelParityTest.src[:1])
        self.assertTrue(torch.equal(before, after))

    def test_bfloat16_export(self):
        _, _, _, model, loaded = self.round_trip(decoder_config([SELF_SPECS["rfa_arccos"]]), dtype="bfloat16")
        for name, tensor in model.state_dict().items():
            self.assertTrue(torch.equal(tensor.to(torch.bfloat16).float(), loaded.state_dict()[name]), name)

    def test_tensor_names(self):
        config = encdec_config([{"type": "abc", "slots": 2, "shared_control": True}], [SELF_SPECS["rfa_gaussian_gate"]], [SELF_SPECS["abc"]])
        shapes = {name: list(t.shape) for name, t in build_model(config).state_dict().items()}
        d, h, dh = D_MODEL, N_HEADS, D_MODEL // N_HEADS
        expected = {
            "embed.weight": [96, d],
            "encoder.shared_control.weight": [h * 2, d],
            "encoder.layers.0.attn.q.weight": [d, d],
            "encoder.ln_f.bias": [d],
            "decoder.layers.0.attn.rfa.proj": [h, 8, dh],
            "decoder.layers.0.attn.rfa.sigma": [h, dh],
            "decoder.layers.0.attn.gate.weight": [h, d],
            "decoder.layers.0.ln_cross.weight": [d],
            "decoder.layers.0.cross.control.weight": [h * 4, d],
            "decoder.layers.0.cross.o.bias": [d],
            "decoder.layers.0.ffn.fc1.weight": [64, d],
            "decoder.layers.0.ffn.fc2.weight": [d, 64],
        }
        for name, shape in expected.items():
            self.assertEqual(shapes.get(name), shape, name)
        self.assertNotIn("encoder.layers.0.attn.control.weight", shapes)
        self.assertNotIn("lm_head.weight", shapes)


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_layout(self):
        tensors = {
            "b.f32": torch.randn(3, 4),
            "a.bf16": torch.randn(5).to(torch.bfloat16),
            "c.f16": torch.randn(2, 1, 3).half(),
            "d.i32": torch.arange(7, dtype=torch.int32),
            "e.i64": torch.tensor([-1, 2**40]),
            "f.scalar": torch.tensor(1.5),
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.safetensors"
            save_file(tensors, path, metadata={"k": "v"})
            loaded, metadata = load_file(path, with_metadata=True)
            blob = path.read_bytes()
        self.assertEqual(metadata, {"k": "v"})
        for name, tensor in tensors.items():
            self.assertEqual(loaded[name].dtype, tensor.dtype)
            self.assertTrue(torch.equal(loaded[name], tensor), name)
        (header_len,) = struct.unpack("<Q", blob[:8])
        self.assertEqual(header_len % 8, 0)
        header = json.loads(blob[8 : 8 + header_len])
        del header["__metadata__"]
        offsets = [header[name]["data_offsets"] for name in sorted(header)]
        self.assertEqual(offsets[0][0], 0)
        self.assertTrue(all(prev[1] == cur[0] for prev, cur in zip(offsets, offsets[1:])))
        self.assertEqual(offsets[-1][1], len(blob) - 8 - header_len)


class ConfigTest(unittest.TestCase):
    def test_json_round_trip(self):
        config = encdec_config([SELF_SPECS["rfa_arccos"]], [SELF_SPECS["window"]], [SELF_SPECS["abc"]])
        self.assertEqual(ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))), config)

    def test_invalid_configs(self):
        def rejects(make):
            with self.assertRaises(ConfigError):
                make().validate()

        rejects(lambda: decoder_config([{"type": "window", "window": 0}]))
        rejects(lambda: decoder_config([SELF_SPECS["softmax"]], d_model=30))
        rejects(lambda: decoder_config([{"type": "abc", "slots": 4, "shared_control": True}, {"type": "abc", "slots": 2, "shared_control": True}]))
        rejects(lambda: encdec_config([SELF_SPECS["window"]], [SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]]))
        rejects(lambda: encdec_config([SELF_SPECS["rfa_gaussian_gate"]], [SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]]))
        rejects(lambda: encdec_config([SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]], [SELF_SPECS["window"]]))
        rejects(lambda: encdec_config([SELF_SPECS["softmax"]], [SELF_SPECS["softmax"]], [SELF_SPECS["rfa_arccos_gate"]]))
        rejects(lambda: decoder_config([{"type": "window", "window": 4, "dilation": 0}]))
        rejects(lambda: decoder_config([{"type": "window", "window": 3, "dilation": 2**30}]))
        with self.assertRaises(ConfigError):
            AttentionSpec.from_dict({"type": "softmax", "dilation": 2}, "layer")
        # dilation 1 (the default) is not written: configs from before it existed stay byte-identical.
        self.assertEqual(spec(SELF_SPECS["window"]).to_dict(), {"type": "window", "window": 4})
        self.assertEqual(spec(SELF_SPECS["window_dilated"]).to_dict(), SELF_SPECS["window_dilated"])
        with self.assertRaises(ConfigError):
            ModelConfig.from_dict({**decoder_config([SELF_SPECS["softmax"]]).to_dict(), "extra": 1})
        with self.assertRaises(ConfigError):
            AttentionSpec.from_dict({"type": "softmax", "slots": 3}, "layer")

    def test_abc_control_fields(self):
        for fields in (
            {"type": "abc", "slots": 4, "control": "tanh"},
            {"type": "abc", "slots": 4, "control": "random"},  # seed missing
            {"type": "abc", "slots": 4, "control": "random", "seed": -1},
            {"type": "abc", "slots": 4, "control": "random", "seed": 1, "reduce": "max"},
            {"type": "abc", "slots": 4, "control": "relu", "seed": 1},
            {"type": "abc", "slots": 4, "control": "random", "seed": 1, "shared_control": True},
        ):
            with self.subTest(fields), self.assertRaises(ConfigError):
                decoder_config([fields]).validate()
        with self.assertRaises(ConfigError):
            AttentionSpec.from_dict({"type": "softmax", "control": "exp"}, "layer")
        # exp (the default) is not written, so configs from before `control` stay byte-identical.
        self.assertEqual(spec(SELF_SPECS["abc"]).to_dict(), {"type": "abc", "slots": 4, "shared_control": False})
        self.assertEqual(
            spec({"type": "abc", "slots": 4, "control": "random", "seed": 5}).to_dict(),
            {"type": "abc", "slots": 4, "shared_control": False, "control": "random", "seed": 5, "reduce": "mean"},
        )
        config = encdec_config([SELF_SPECS["abc_relu"]], [SELF_SPECS["abc_random_sum"]], [SELF_SPECS["abc_random"]])
        self.assertEqual(ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))), config)


class PositionsTest(unittest.TestCase):
    def test_sinusoidal_formula(self):
        pe = sinusoidal_positions(5, 3, 16)
        self.assertEqual(pe.dtype, torch.float32)
        for t in range(3):
            for i in range(8):
                angle = (5 + t) / 10000 ** (2 * i / 16)
                self.assertEqual(pe[t, 2 * i].item(), torch.tensor(math.sin(angle), dtype=torch.float32).item())
                self.assertEqual(pe[t, 2 * i + 1].item(), torch.tensor(math.cos(angle), dtype=torch.float32).item())


if __name__ == "__main__":
    unittest.main()
