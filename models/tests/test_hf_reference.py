"""Tests of the HF-layout reference (abcd_ref.hf) and its checkpoint writer: layouts (legacy, sharded,
bf16, tied) load to the same model, config round trip and refusals, state bytes of the 1.3B shapes,
RoPE scaling and RetNet decays by hand, parallel == recurrent for every mixer.

Run from the repository root: /usr/bin/python3 -m unittest discover -s models/tests
"""

import json
import math
import struct
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abcd_ref import hf  # noqa: E402
from abcd_ref.hf.config import kv_bytes_per_token  # noqa: E402
from abcd_ref.config import ConfigError  # noqa: E402
from abcd_ref.hf.checkpoint import random_tensor, read_tensors  # noqa: E402
from abcd_ref.hf.config import intermediate_size, kv_bytes_per_token, rope_settings  # noqa: E402
from abcd_ref.hf.gated_linear import retnet_decays  # noqa: E402
from abcd_ref.hf.short_conv import ShortConvolution  # noqa: E402
from abcd_ref.hf.skeleton import rope_inv_freq  # noqa: E402
from abcd_ref.safetensors_io import load_file, save_file_streamed  # noqa: E402

TOKENIZER = Path(__file__).resolve().parents[1] / "tokenizers" / "lm.model"


def tokens(n=20, vocab=96, seed=0):
    return torch.randint(4, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits_of(model_dir, ids):
    model, _ = hf.load_checkpoint(model_dir)
    return hf.run_recurrent(model, ids)[0]


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, config, **kwargs):
        kwargs.setdefault("seed", 3)
        written = hf.write_checkpoint(self.tmp / name, config, **kwargs)
        return self.tmp / name, written


class LayoutTest(TempDirTest):
    def assert_same_logits(self, config, **variant):
        current, _ = self.write("current", config)
        other, _ = self.write("other", config, **variant)
        ids = tokens()
        torch.testing.assert_close(logits_of(other, ids), logits_of(current, ids), rtol=0, atol=0)
        return other

    def test_legacy_layouts_equal_current(self):
        cases = {
            "gsa": {"feature_map": "relu"},
            "gla": {"num_kv_heads": 2, "clamp_min": -0.5},
            "retnet": {},
            "hgrn2": {},
        }
        for model_type, overrides in cases.items():
            with self.subTest(model_type):
                legacy = hf.DEFAULT_LEGACY[model_type] + ("embed_tokens",)
                other = self.assert_same_logits(hf.preset_config(model_type, **overrides), legacy=legacy)
                names = set(read_tensors(other))
                self.assertIn("model.embed_tokens.weight", names)
                self.assertNotIn("model.layers.0.mlp.up_proj.weight", names)
                self.assertEqual(load_file(other / "model.safetensors")["model.layers.1.mlp.gate_proj.weight"].shape[0], 512)
                if model_type == "gsa":
                    self.assertTrue({"model.layers.0.attn.norm.weight", "model.layers.0.mlp.norm.weight"} <= names)
                    self.assertNotIn("model.layers.0.attn_norm.weight", names)
                    self.assertTrue(json.loads((other / "config.json").read_text())["norm_first"])
                if model_type in ("gla", "retnet"):
                    self.assertIn("model.layers.0.attn.g_norm.weight", names)
                    self.assertNotIn("model.layers.0.attn.g_norm_swish_gate.weight", names)

    def test_fused_gate_proj_rows(self):
        config = hf.preset_config("gsa")
        path, _ = self.write("legacy", config, legacy=["fused_mlp"])
        fused = load_file(path / "model.safetensors")["model.layers.0.mlp.gate_proj.weight"]
        gate = random_tensor("model.layers.0.mlp.gate_proj.weight", [256, 64], 3)
        up = random_tensor("model.layers.0.mlp.up_proj.weight", [256, 64], 3)
        torch.testing.assert_close(fused, torch.cat([gate, up]), rtol=0, atol=0)

    def test_sharded_equals_single_file(self):
        for model_type in ("llama", "gsa"):
            with self.subTest(model_type):
                config = hf.preset_config(model_type)
                sharded = self.assert_same_logits(config, shards=3)
                index = json.loads((sharded / "model.safetensors.index.json").read_text())
                files = sorted(set(index["weight_map"].values()))
                self.assertEqual(files, [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)])
                self.assertFalse((sharded / "model.safetensors").exists())
                single = load_file(self.tmp / "current" / "model.safetensors")
                self.assertEqual(set(index["weight_map"]), set(single))
                total = sum(t.numel() * t.element_size() for t in single.values())
                self.assertEqual(index["metadata"]["total_size"], total)
                for file_name in files:
                    shard = load_file(sharded / file_name)
                    self.assertTrue(shard)
                    self.assertEqual(set(shard), {n for n, f in index["weight_map"].items() if f == file_name})

    def test_tied_has_no_lm_head(self):
        for model_type, key in (("llama", "model.embed_tokens.weight"), ("retnet", "model.embeddings.weight")):
            with self.subTest(model_type):
                path, _ = self.write(model_type, hf.preset_config(model_type, tie_word_embeddings=True))
                tensors = load_file(path / "model.safetensors")
                self.assertNotIn("lm_head.weight", tensors)
                model, _ = hf.load_checkpoint(path)
                torch.testing.assert_close(model.lm_head.weight, tensors[key], rtol=0, atol=0)

    def test_pickle_only_refused(self):
        path = self.tmp / "bin"
        path.mkdir()
        (path / "config.json").write_text(json.dumps(hf.preset_config("gla")))
        (path / "pytorch_model.bin").write_bytes(b"\x80")
        with self.assertRaisesRegex(ValueError, "pytorch_model.bin"):
            hf.load_checkpoint(path)

    def test_gsa_output_gate_tensor_refused(self):
        path, _ = self.write("gsa", hf.preset_config("gsa"))
        tensors = load_file(path / "model.safetensors")
        tensors["model.layers.0.attn.g_proj.weight"] = torch.zeros(64, 64)
        with self.assertRaisesRegex(ConfigError, "g_proj"):
            hf.checkpoint.to_current_layout(tensors, hf.preset_config("gsa"))


def bf16_rne_bits(values):
    """Hand round-to-nearest-even of fp32 values to bf16 bit patterns (finite inputs)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    upper, lower = bits >> 16, bits & 0xFFFF
    round_up = (lower > 0x8000) | ((lower == 0x8000) & (upper & 1 == 1))
    return (upper + round_up).astype(np.uint16)


class DtypeTest(TempDirTest):
    def test_bf16_rounds_to_nearest_even(self):
        ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F80FFFF, 0x3F807FFF], dtype=np.uint32)
        values = torch.from_numpy(ties.view(np.float32).copy())
        save_file_streamed({"t": (torch.bfloat16, [6], lambda: values)}, self.tmp / "t.safetensors")
        raw = (self.tmp / "t.safetensors").read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])
        written = np.frombuffer(raw[8 + header_len :], dtype=np.uint16)
        np.testing.assert_array_equal(written, [0x3F80, 0x3F82, 0xBF80, 0xBF82, 0x3F81, 0x3F80])
        np.testing.assert_array_equal(written, bf16_rne_bits(values.numpy()))

    def test_bf16_checkpoint_is_rounded_fp32_weights(self):
        config = hf.preset_config("gsa")
        path, written = self.write("bf16", config, dtype="bf16")
        self.assertEqual(written["torch_dtype"], "bfloat16")
        tensors = load_file(path / "model.safetensors")
        for name, shape in hf.tensor_shapes(config):
            self.assertEqual(tensors[name].dtype, torch.bfloat16)
            expected = bf16_rne_bits(random_tensor(name, shape, 3).numpy()).astype(np.int16)
            np.testing.assert_array_equal(tensors[name].view(torch.int16).numpy(), expected)
        model, _ = hf.load_checkpoint(path)  # the reference computes with the rounded weights
        torch.testing.assert_close(model.lm_head.weight, tensors["lm_head.weight"].float(), rtol=0, atol=0)

    def test_f16(self):
        path, _ = self.write("f16", hf.preset_config("hgrn2"), dtype="f16")
        self.assertTrue(all(t.dtype == torch.float16 for t in load_file(path / "model.safetensors").values()))
        self.assertTrue(torch.isfinite(logits_of(path, tokens(4))).all())


class ConfigTest(TempDirTest):
    def test_writer_config_round_trips(self):
        for model_type in hf.MODEL_TYPES:
            with self.subTest(model_type):
                config = hf.preset_config(model_type, num_hidden_layers=3)
                if model_type == "abcd_llama":
                    config["abcd_layers"] = [{"type": "t2r", "features": 8, "eps": 1e-6}, {"type": "softmax"}, {"type": "abc", "slots": 8}]
                path, written = self.write(model_type, config)
                read = json.loads((path / "config.json").read_text())
                self.assertEqual(read, written)
                self.assertEqual(read["model_type"], model_type)
                self.assertEqual(read["architectures"], [hf.config.ARCHITECTURES[model_type]])
                self.assertEqual(vars(hf.resolve(read)), vars(hf.resolve(config)))
                if model_type not in hf.config.LLAMA_TYPES + ("abcd_llama",):
                    self.assertIsNone(read["intermediate_size"])  # exercised: the rounding rule
                    self.assertIn("hidden_ratio", read)
                else:
                    self.assertEqual(read["head_dim"], 16)
                names = [n for n, _ in hf.tensor_shapes(read)]
                self.assertEqual(sorted(load_file(path / "model.safetensors")), sorted(names))
                self.assertEqual(read["torch_dtype"], "float32")
                generation = json.loads((path / "generation_config.json").read_text())
                self.assertEqual((generation["bos_token_id"], generation["eos_token_id"]), (1, 2))

    def test_module_names_are_the_hf_names(self):
        for model_type in hf.MODEL_TYPES:
            config = hf.preset_config(model_type, feature_map="t2r") if model_type == "gsa" else hf.preset_config(model_type)
            with self.subTest(model_type):
                state = {n: list(t.shape) for n, t in hf.build_model(config).state_dict().items()}
                self.assertEqual(state, dict(hf.tensor_shapes(config)))

    def test_tokenizer_files(self):
        path, written = self.write("tok", hf.preset_config("gsa"), tokenizer=TOKENIZER)
        self.assertEqual(written["vocab_size"], 8000)
        self.assertEqual((written["bos_token_id"], written["eos_token_id"], written["pad_token_id"]), (1, 2, 0))
        self.assertEqual((path / "tokenizer.model").read_bytes(), TOKENIZER.read_bytes())
        tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
        self.assertEqual((tokenizer_config["bos_token"], tokenizer_config["eos_token"]), ("<s>", "</s>"))
        self.assertTrue(tokenizer_config["add_bos_token"])
        self.assertFalse(tokenizer_config["add_eos_token"])
        self.assertEqual(json.loads((path / "special_tokens_map.json").read_text())["unk_token"], "<unk>")
        self.assertEqual(load_file(path / "model.safetensors")["model.embeddings.weight"].shape[0], 8000)

    def test_intermediate_size_rounding(self):
        self.assertEqual(intermediate_size(2048, 4, None), 5632)
        self.assertEqual(intermediate_size(2048, 2, None), 2816)
        self.assertEqual(intermediate_size(2560, 4, None), 6912)
        self.assertEqual(intermediate_size(64, 4, None), 256)
        self.assertEqual(intermediate_size(64, None, None), 256)
        self.assertEqual(intermediate_size(64, 4, 100), 100)

    def test_derived_sizes(self):
        hgrn2 = hf.resolve(hf.preset_config("hgrn2"))
        self.assertEqual((hgrn2.num_heads, hgrn2.head_k_dim, hgrn2.head_v_dim), (4, 16, 16))
        hgrn2 = hf.resolve(hf.preset_config("hgrn2", expand_ratio=None, num_heads=8))
        self.assertEqual((hgrn2.num_heads, hgrn2.head_k_dim), (8, 8))
        gsa = hf.resolve({**hf.preset_config("gsa"), "exapnd_k": 0.5})
        self.assertEqual(gsa.key_dim, 64)  # expand_k present: the misspelled key is ignored
        config = hf.preset_config("gsa", num_slots=None)
        del config["expand_k"]
        config["exapnd_k"] = 0.5
        gsa = hf.resolve(config)
        self.assertEqual((gsa.key_dim, gsa.head_k_dim, gsa.num_slots), (32, 8, 8))  # num_slots null -> K

    def test_refusals_name_the_field(self):
        cases = [
            ("gsa", {"attn": {"layers": [1], "num_heads": 4, "window_size": 64}}, "attn.window_size"),
            ("gsa", {"attn": {"layers": [2], "num_heads": 4}}, "attn.layers"),
            ("gla", {"attn": {"layers": [0], "num_heads": 3}}, "hidden_size"),
            ("abcd_llama", {"num_key_value_heads": 2}, "num_key_value_heads"),
            ("abcd_llama", {"abcd_layers": [{"type": "rfa"}, {"type": "softmax"}]}, r"abcd_layers\[0\].type"),
            ("abcd_llama", {"abcd_layers": [{"type": "softmax"}]}, "abcd_layers"),
            ("gla", {"attnres_block_size": 4}, "attnres_block_size"),
            ("retnet", {"hidden_act": "powlu"}, "hidden_act"),
            ("hgrn2", {"elementwise_affine": False}, "elementwise_affine"),
            ("gsa", {"use_short_conv": True, "conv_size": 0}, "conv_size"),
            ("gated_deltanet", {"num_v_heads": 3}, "num_v_heads"),
            ("gated_deltanet", {"expand_v": 1.3}, "expand_v"),
            ("gsa", {"expand_v": 2}, "value_dim"),
            ("gsa", {"feature_map": "elu"}, "feature_map"),
            ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type"),
            ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "rope_parameters.rope_type"),
            ("llama", {"rope_scaling": {"type": "llama3", "factor": 8.0}}, "low_freq_factor"),
            ("llama", {"num_key_value_heads": 3}, "num_attention_heads"),
            ("qwen2", {"use_sliding_window": True, "sliding_window": 0}, "sliding_window"),
            ("qwen3", {"layer_types": ["full_attention", "sliding_attention"]}, r"layer_types\[1\]"),
            ("qwen3", {"use_sliding_window": True, "layer_types": ["full_attention", "chunked"]}, r"layer_types\[1\]"),
            ("mistral", {"sliding_window": 0}, "sliding_window"),
        ]
        for model_type, overrides, field in cases:
            with self.subTest(field=field), self.assertRaisesRegex(ConfigError, field):
                hf.resolve(hf.preset_config(model_type, **overrides))
        hf.resolve(hf.preset_config("retnet", use_short_conv=True))  # fla never gives RetNet a conv: ignored

    def test_state_bytes_of_the_1_3b_shapes(self):
        # gated_deltanet (IMPORT-SPEC 7): S 6 x 256 x 512 plus 3 conv columns of 2 x 1536 + 3072 channels, 21 layers
        expected = {"gsa": 25_165_824, "gla": 50_331_648, "retnet": 100_663_296, "hgrn2": 25_165_824, "gated_deltanet": 67_608_576}
        for model_type, value in expected.items():
            with self.subTest(model_type):
                self.assertEqual(hf.state_bytes(hf.preset_config(model_type, "1.3b")), value)
        gsa_27b = hf.preset_config("gsa", "1.3b", hidden_size=2560, num_hidden_layers=32)
        self.assertEqual(hf.state_bytes(gsa_27b), 41_943_040)
        self.assertEqual(hf.state_bytes(hf.preset_config("llama", "1.3b", num_key_value_heads=32)), 393_216)
        self.assertEqual(hf.state_bytes(hf.preset_config("llama", "1.3b")), 98_304)  # GQA 32/8
        self.assertEqual(hf.state_bytes(hf.preset_config("gsa", "1.3b", num_kv_heads=2)), 25_165_824)  # H copies
        self.assertEqual(hf.resolve(hf.preset_config("gla", "1.3b")).intermediate_size, 5632)
        self.assertEqual(hf.resolve(hf.preset_config("retnet", "1.3b")).intermediate_size, 2816)
        # the Llama-built types at their published attention (2 L Hkv hd 4 bytes per token): qwen2 Qwen2.5's
        # 2 KV heads of 128, qwen3 and mistral 8 of 128; mistral's 4096-token window is a fixed ring of that
        self.assertEqual(kv_bytes_per_token(hf.preset_config("qwen2", "1.3b")), 49_152)
        self.assertEqual(kv_bytes_per_token(hf.preset_config("qwen3", "1.3b")), 196_608)
        self.assertEqual(hf.state_bytes(hf.preset_config("mistral", "1.3b")), 4096 * 196_608)
        self.assertEqual(kv_bytes_per_token(hf.preset_config("mistral", "1.3b")), 0)
        published = {"qwen2": (1e6, 1e-6, True), "qwen3": (1e6, 1e-6, True), "mistral": (1e4, 1e-5, False)}
        for model_type, (theta, eps, tied) in published.items():
            config = hf.preset_config(model_type, "1.3b")
            self.assertEqual((config["rope_theta"], config["rms_norm_eps"], config["tie_word_embeddings"]), (theta, eps, tied))
        self.assertTrue(hf.preset_config("qwen3", "1.3b")["tie_word_embeddings"])
        self.assertEqual(hf.state_bytes(hf.preset_config("gsa", "1.3b", use_short_conv=True)), 25_165_824 + 24 * 3 * 6144 * 4)


class MathTest(unittest.TestCase):
    def test_rope_scaling_by_hand(self):
        dim, theta = 32, 10000.0
        base = [theta ** (-2 * i / dim) for i in range(dim // 2)]
        linear = rope_inv_freq(dim, theta, {"rope_type": "linear", "factor": 4.0})
        np.testing.assert_allclose(linear.numpy(), [f / 4 for f in base], rtol=1e-6)
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
        scaling["original_max_position_embeddings"] = 64.0
        expected, bands = [], set()
        for f in base:
            wavelen = 2 * math.pi / f
            if wavelen < 64 / 4:
                expected.append(f)
                bands.add("high")
            elif wavelen > 64 / 1:
                expected.append(f / 8)
                bands.add("low")
            else:
                s = (64 / wavelen - 1) / (4 - 1)
                expected.append((1 - s) * f / 8 + s * f)
                bands.add("medium")
        self.assertEqual(bands, {"high", "medium", "low"})
        np.testing.assert_allclose(rope_inv_freq(dim, theta, scaling).numpy(), expected, rtol=1e-6)

    def test_rope_parameters_read_first(self):
        config = hf.preset_config("llama", rope_theta=10000.0, rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0})
        self.assertEqual(rope_settings(config), (500000.0, {"rope_type": "linear", "factor": 4.0}))
        self.assertEqual(rope_settings(hf.preset_config("llama", rope_parameters={"rope_type": "default", "rope_theta": 1e6})), (1e6, None))
        legacy = hf.preset_config("llama", rope_scaling={"type": "linear", "factor": 2.0})
        self.assertEqual(rope_settings(legacy), (10000.0, {"rope_type": "linear", "factor": 2.0}))

    def test_rope_rotates_half_split_pairs(self):
        from abcd_ref.hf.skeleton import apply_rope

        x = torch.arange(1.0, 9.0).view(1, 1, 1, 8)
        inv = rope_inv_freq(8, 10000.0)
        out = apply_rope(x, torch.tensor([3]), inv)[0, 0, 0]
        for i in range(4):
            angle = 3 * 10000.0 ** (-2 * i / 8)
            self.assertAlmostEqual(out[i].item(), x[0, 0, 0, i].item() * math.cos(angle) - x[0, 0, 0, i + 4].item() * math.sin(angle), 5)
            self.assertAlmostEqual(out[i + 4].item(), x[0, 0, 0, i + 4].item() * math.cos(angle) + x[0, 0, 0, i].item() * math.sin(angle), 5)

    @torch.no_grad()
    def test_short_conv_by_hand(self):
        """y_t = silu(b + sum_i w[:, 0, i] x_{t - (W-1) + i}) with zeros before the first input; the cache
        is the last W - 1 inputs; the parallel form (F.conv1d) agrees."""
        conv = ShortConvolution(3, 4, bias=True, activation="silu").double()
        conv.weight.copy_(torch.randn(3, 1, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
        conv.bias.copy_(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))
        x = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        cache, steps = conv.init_state(1, torch.float64), []
        for t in range(6):
            y, cache = conv.step(x[:, t], cache)
            steps.append(y)
            padded = torch.cat([torch.zeros(1, 3, 3, dtype=torch.float64), x[:, : t + 1]], 1)[:, -4:]
            by_hand = torch.nn.functional.silu(conv.bias + (padded[0] * conv.weight[:, 0, :].T).sum(0))
            torch.testing.assert_close(y[0], by_hand, rtol=0, atol=1e-12)
            torch.testing.assert_close(cache[0], padded[0, 1:], rtol=0, atol=0)
        torch.testing.assert_close(conv(x), torch.stack(steps, 1), rtol=0, atol=1e-12)

    def test_retnet_decays(self):
        self.assertEqual(retnet_decays(4).tolist(), [1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128, 1 - 1 / 256])
        self.assertEqual(retnet_decays(4).float().double().tolist(), retnet_decays(4).tolist())  # exact in fp32

    def test_hgrn2_lower_bounds(self):
        model = hf.build_model(hf.preset_config("hgrn2", num_hidden_layers=3))
        torch.nn.init.normal_(model.model.lower_bounds)
        extras = model.model.layer_extras()
        self.assertIsNone(extras[0]["lower_bound"])
        b = model.model.lower_bounds.softmax(0)
        torch.testing.assert_close(extras[1]["lower_bound"], b[1])
        torch.testing.assert_close(extras[2]["lower_bound"], b[1] + b[2])

    @torch.no_grad()
    def test_parallel_equals_recurrent(self):
        cases = {
            "gsa": {},
            "gsa_t2r_gqa": {"feature_map": "t2r", "num_kv_heads": 2},
            "gla": {"feature_map": "relu"},
            "gla_gqa_clamp": {"num_kv_heads": 2, "clamp_min": -0.3, "use_output_gate": False},
            "retnet": {},
            "retnet_gqa": {"num_kv_heads": 2},
            "hgrn2": {},
            "gsa_conv_gqa": {"use_short_conv": True, "num_kv_heads": 2},
            "gla_conv_bias": {"use_short_conv": True, "conv_size": 3, "conv_bias": True},
            "hgrn2_conv": {"use_short_conv": True, "conv_size": 2},
            "gated_deltanet": {},
            "gated_deltanet_gva": {"num_v_heads": 4, "use_short_conv": False, "use_gate": False, "allow_neg_eigval": True},
            "gated_deltanet_bias": {"conv_bias": True, "expand_v": 1.5},
            "llama": {"num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True},
            "mistral": {"sliding_window": 5},
            "qwen2": {"tie_word_embeddings": True},
            "qwen3": {"head_dim": 32, "attention_bias": True},
        }
        for case, overrides in cases.items():
            with self.subTest(case):
                model_type = max((t for t in hf.MODEL_TYPES if case == t or case.startswith(t + "_")), key=len)
                config = hf.preset_config(model_type, **overrides)
                model = hf.build_model(config)
                state = {n: random_tensor(n, list(t.shape), 5) for n, t in model.state_dict().items()}
                model.load_state_dict(state)
                model = model.double()
                ids = tokens(24, seed=1)
                recurrent, _ = hf.run_recurrent(model, ids)
                torch.testing.assert_close(model(ids), recurrent, rtol=1e-9, atol=1e-9)
                # prefill then decode continues the position (RetNet, Llama) and the state
                _, state = hf.run_recurrent(model, ids[:, :10])
                torch.testing.assert_close(hf.run_recurrent(model, ids[:, 10:], state)[0], recurrent[:, 10:])


class LlamaLikeTest(unittest.TestCase):
    """Mistral's window, Qwen2's biases and Qwen3's q/k norms, each checked by a property of the math."""

    def model(self, model_type, **overrides):
        model = hf.build_model(hf.preset_config(model_type, **overrides))
        model.load_state_dict({n: random_tensor(n, list(t.shape), 7) for n, t in model.state_dict().items()})
        return model.double()

    @torch.no_grad()
    def test_mistral_window_forgets_tokens_beyond_its_reach(self):
        model, w = self.model("mistral", sliding_window=4), 4
        ids = tokens(20, seed=2)
        changed = ids.clone()
        changed[0, 0] = 4 if ids[0, 0] != 4 else 5
        a, b = model(ids), model(changed)
        reach = 2 * (w - 1)  # two layers: token 0 reaches positions <= 2 (w - 1)
        self.assertGreater((a[0, reach] - b[0, reach]).abs().max().item(), 1e-6)
        torch.testing.assert_close(a[0, reach + 1 :], b[0, reach + 1 :], rtol=0, atol=1e-12)
        full = self.model("mistral", sliding_window=None)
        self.assertEqual(hf.resolve(hf.preset_config("mistral", sliding_window=4)).layer_windows, [4, 4])
        torch.testing.assert_close(full(ids)[0, :w], a[0, :w], rtol=0, atol=1e-12)  # same weights

    def test_mistral_window_state_is_a_fixed_ring(self):
        config = hf.preset_config("mistral", sliding_window=5)  # L 2, Hkv 2, hd 16
        self.assertEqual((hf.state_bytes(config), kv_bytes_per_token(config)), (2 * 2 * 2 * 16 * 5 * 4, 0))
        config = hf.preset_config("mistral", sliding_window=None)
        self.assertEqual((hf.state_bytes(config), kv_bytes_per_token(config)), (2 * 2 * 2 * 16 * 4,) * 2)

    def test_qwen_windows_as_transformers_derives_them(self):
        windows = lambda **kw: hf.resolve(hf.preset_config("qwen2", num_hidden_layers=4, **kw)).layer_windows  # noqa: E731
        self.assertEqual(windows(sliding_window=8), [None] * 4)  # use_sliding_window false
        self.assertEqual(windows(use_sliding_window=True, sliding_window=8, max_window_layers=2), [None, None, 8, 8])
        types = ["sliding_attention", "full_attention"] * 2
        self.assertEqual(windows(use_sliding_window=True, sliding_window=8, layer_types=types), [8, None, 8, None])
        config = hf.preset_config("qwen3", use_sliding_window=True, sliding_window=3, max_window_layers=1)
        self.assertEqual((hf.state_bytes(config), kv_bytes_per_token(config)), (2 * 2 * 16 * 3 * 4, 2 * 2 * 16 * 4))

    @torch.no_grad()
    def test_qwen2_biases_are_on_qkv_only(self):
        attn = self.model("qwen2").model.layers[0].self_attn
        self.assertEqual([p.bias is not None for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)], [True] * 3 + [False])

    @torch.no_grad()
    def test_qwen3_norms_make_q_and_k_scale_free(self):
        model = self.model("qwen3", head_dim=32, rms_norm_eps=1e-30)
        ids = tokens(12, seed=3)
        before = model(ids)
        for layer in model.model.layers:  # q and k heads are RMS-normalised before RoPE: any scale cancels
            layer.self_attn.q_proj.weight.mul_(3.0)
            layer.self_attn.k_proj.weight.mul_(0.25)
        torch.testing.assert_close(model(ids), before, rtol=1e-9, atol=1e-9)
        self.assertEqual(model.model.layers[0].self_attn.q_proj.weight.shape[0], 4 * 32)  # explicit head_dim


class FixtureTest(unittest.TestCase):
    @torch.no_grad()
    def test_committed_hf_fixtures_reproduce(self):
        """The hf_* golden fixtures are listed in index.json and the reference still computes their logits."""
        golden_dir = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "golden"
        names = [n for n in json.loads((golden_dir / "index.json").read_text()) if n.startswith("hf_")]
        self.assertEqual(len(names), 29)
        for name in names:
            with self.subTest(name):
                golden = load_file(golden_dir / name / "golden.safetensors")
                model, config = hf.load_checkpoint(golden_dir / name)
                ids = torch.cat([golden["prompt_ids"], golden["decode_ids"]]).long()[None]
                self.assertEqual(ids[0, 0].item(), config["bos_token_id"])
                logits = hf.run_recurrent(model, ids)[0][0]
                expected = torch.cat([golden["prefill_logits"], golden["decode_logits"]])
                torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
                # The greedy continuation (float64 reference): the same ids, log-probs within 1e-6.
                model = model.double()
                step_logits, state = hf.run_recurrent(model, golden["prompt_ids"].long()[None])
                last, chosen = step_logits[0, -1], []
                for token in golden["greedy_ids"].long():
                    chosen.append(last.log_softmax(-1)[token].item())
                    self.assertEqual(last.argmax().item(), token.item())
                    last, state = model.step(token.view(1), state)
                    last = last[0]
                torch.testing.assert_close(torch.tensor(chosen, dtype=torch.float64), golden["greedy_logprobs"].double(), rtol=0, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
