"""Tests of the HF conversion (models/convert.py --from-hf, convert_hf.py) and its finetuning
(hf_train.py): tensors carried over and initialised as documented, converted models equal to
hand-written math of their layers (what the engine computes on the hf_abcd_llama_* / hf_gsa_hybrid
fixtures), every-layer-kept conversions equal to the source, one-line errors naming the field,
the chunked GSA training form, frozen parameters and resuming.

Run from the repository root: /usr/bin/python3 -m unittest models.tests.test_uptrain
"""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import convert  # noqa: E402
import convert_hf  # noqa: E402
import hf_train  # noqa: E402
import train as trainer  # noqa: E402
from abcd_ref import hf  # noqa: E402
from abcd_ref.hf.gsa import gsa_chunked  # noqa: E402
from abcd_ref.hf.skeleton import rms_norm  # noqa: E402

HAVE_DATA = (trainer.DATA / "lm.train.txt").exists() and (trainer.DATA / "lm.valid.txt").exists()


def ids(n=24, vocab=96, seed=0):
    return torch.randint(4, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits(model_dir, tokens):
    model, _ = hf.load_checkpoint(model_dir)
    recurrent = hf.run_recurrent(model, tokens)[0]
    torch.testing.assert_close(model(tokens), recurrent, rtol=0, atol=2e-5)  # parallel == recurrent
    return recurrent


def run_convert(*argv):
    """convert.main(argv) -> (exit code or None, stderr text)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            convert.main(list(argv))
        except SystemExit as e:
            return e.code, err.getvalue()
    return None, err.getvalue()


def mlp_out(t, p, h):
    return t[p + "mlp.down_proj.weight"] @ (F.silu(t[p + "mlp.gate_proj.weight"] @ h) * (t[p + "mlp.up_proj.weight"] @ h))


def one_layer_logits(t, eps, mixer):
    """Logits [T, V] of a 1-layer Llama-named model with `mixer(h [T, d]) -> [T, d]` as its attention."""
    x = t["model.embed_tokens.weight"][ids(12)[0]]
    p = "model.layers.0."
    x = x + mixer(rms_norm(x, t[p + "input_layernorm.weight"], eps))
    h = rms_norm(x, t[p + "post_attention_layernorm.weight"], eps)
    x = x + mlp_out(t, p, h.T).T
    return rms_norm(x, t["model.norm.weight"], eps) @ t["lm_head.weight"].T


class ConvertTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)
        self.source = self.tmp / "llama"
        hf.write_checkpoint(self.source, hf.preset_config("llama", num_key_value_heads=2), seed=7)

    def tearDown(self):
        self._tmp.cleanup()

    def test_round_trip_tensors(self):
        src = hf.checkpoint.read_tensors(self.source)
        for target, extra in (("t2r", ["--features", "8"]), ("abc", ["--slots", "8"]), ("gsa", ["--num-slots", "8"])):
            with self.subTest(target):
                out = self.tmp / target
                self.assertIsNone(run_convert("--from-hf", str(self.source), "--to", target, "--out", str(out), "--layers", "1", *extra)[0])
                got = hf.checkpoint.read_tensors(out)
                if target == "gsa":
                    self.assertTrue(torch.equal(got["model.layers.1.attn.k_proj.weight"], src["model.layers.1.self_attn.k_proj.weight"]))
                    self.assertTrue(torch.equal(got["model.layers.0.attn_norm.weight"], src["model.layers.0.input_layernorm.weight"]))
                    self.assertTrue(torch.equal(got["model.layers.1.attn.g_norm.weight"], torch.ones(64)))
                    self.assertEqual(list(got["model.layers.1.attn.f_proj.weight"].shape), [2 * 8, 64])
                    self.assertNotIn("model.layers.0.attn.f_proj.weight", got)
                    continue
                k = src["model.layers.1.self_attn.k_proj.weight"].view(2, 16, 64)
                self.assertTrue(torch.equal(got["model.layers.1.self_attn.k_proj.weight"], k.repeat_interleave(2, 0).reshape(64, 64)))
                self.assertTrue(torch.equal(got["model.layers.1.mlp.up_proj.weight"], src["model.layers.1.mlp.up_proj.weight"]))
                new = "t2r" if target == "t2r" else "control"
                self.assertTrue(torch.equal(got[f"model.layers.1.self_attn.{new}.bias"], torch.zeros_like(got[f"model.layers.1.self_attn.{new}.bias"])))
                self.assertNotIn(f"model.layers.0.self_attn.{new}.weight", got)

    def test_keeping_every_layer_equals_the_source(self):
        """No layer converted: GQA repeated (abcd_llama) or renamed into fla attn layers (gsa) -> same logits."""
        cfg, tensors = convert_hf.read_source(self.source)
        expected = logits(self.source, ids())
        for target in ("t2r", "gsa"):
            with self.subTest(target):
                out_cfg, out = convert_hf.convert(cfg, tensors, target, [])
                hf.write_checkpoint(self.tmp / target, out_cfg, tensors=out)
                torch.testing.assert_close(logits(self.tmp / target, ids()), expected, rtol=0, atol=2e-5)

    def test_fla_transformer_source_reads_as_llama(self):
        """An fla `transformer` directory (fla names, head_dim = d / H) is the same model as the Llama."""
        from abcd_ref.safetensors_io import save_file

        cfg, tensors = convert_hf.read_source(self.source)
        fla = {}
        for name, t in tensors.items():
            name = name.replace("model.embed_tokens.", "model.embeddings.").replace(".input_layernorm.", ".attn_norm.")
            fla[name.replace(".post_attention_layernorm.", ".mlp_norm.").replace(".self_attn.", ".attn.")] = t
        path = self.tmp / "transformer"
        path.mkdir()
        save_file(fla, path / "model.safetensors")
        config = {"model_type": "transformer", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                  "intermediate_size": 128, "vocab_size": 96, "norm_eps": cfg["rms_norm_eps"], "rope_theta": 10000.0}  # fmt: skip
        (path / "config.json").write_text(json.dumps(config))
        got_cfg, got = convert_hf.read_source(path)
        self.assertEqual(sorted(got), sorted(tensors))
        out_cfg, out = convert_hf.convert(got_cfg, got, "t2r", [])
        hf.write_checkpoint(self.tmp / "from-fla", out_cfg, tensors=out)
        torch.testing.assert_close(logits(self.tmp / "from-fla", ids()), logits(self.source, ids()), rtol=0, atol=2e-5)

    def write_one_layer(self, target, **options):
        path = self.tmp / "one"
        hf.write_checkpoint(path, hf.preset_config("llama", num_hidden_layers=1), seed=3)
        cfg, tensors = convert_hf.read_source(path)
        out_cfg, out = convert_hf.convert(cfg, tensors, target, [0], seed=5, **options)
        out_dir = self.tmp / f"one-{target}"
        hf.write_checkpoint(out_dir, out_cfg, tensors=out)
        return out_dir, out, cfg["rms_norm_eps"]

    def test_t2r_layer_is_the_seed_math(self):
        out_dir, t, eps = self.write_one_layer("t2r", features=8)
        p = "model.layers.0.self_attn."

        def mixer(h):
            heads = [(h @ t[p + n + "_proj.weight"].T).view(-1, 4, 16).transpose(0, 1) for n in "qkv"]  # [H, T, 16]
            q, k, v = heads[0] / 4.0, heads[1], heads[2]  # q / sqrt(head_dim); no RoPE
            phi = lambda x: torch.relu(x @ t[p + "t2r.weight"].transpose(-1, -2) + t[p + "t2r.bias"][:, None])  # noqa: E731
            scores = (phi(q) @ phi(k).transpose(-1, -2)).tril()
            y = (scores @ v) / scores.sum(-1, keepdim=True).clamp_min(1e-6)
            return y.transpose(0, 1).reshape(-1, 64) @ t[p + "o_proj.weight"].T

        expected = one_layer_logits(t, eps, mixer)
        torch.testing.assert_close(logits(out_dir, ids(12))[0], expected, rtol=0, atol=2e-5)

    def test_abc_layer_is_the_seed_math(self):
        out_dir, t, eps = self.write_one_layer("abc", slots=8)
        p = "model.layers.0.self_attn."
        n = len(ids(12)[0])

        def mixer(h):
            q, k, v = [(h @ t[p + x + "_proj.weight"].T).view(-1, 4, 16).transpose(0, 1) for x in "qkv"]
            a = (h @ t[p + "control.weight"].T + t[p + "control.bias"]).view(-1, 4, 8).transpose(0, 1)  # [H, T, n]
            out = []
            for s in range(n):
                w = a[:, : s + 1].softmax(1)  # exp control: weights over tokens <= s, per slot
                keys, values = w.transpose(1, 2) @ k[:, : s + 1], w.transpose(1, 2) @ v[:, : s + 1]  # [H, n, 16]
                out.append(((keys @ (q[:, s] / 4.0)[..., None]).squeeze(-1).softmax(-1)[:, None] @ values)[:, 0])
            return torch.stack(out, 1).transpose(0, 1).reshape(-1, 64) @ t[p + "o_proj.weight"].T

        expected = one_layer_logits(t, eps, mixer)
        torch.testing.assert_close(logits(out_dir, ids(12))[0], expected, rtol=0, atol=2e-5)

    def test_bad_inputs_name_the_field(self):
        gsa_dir, wide, biased = self.tmp / "gsa-src", self.tmp / "wide", self.tmp / "biased"
        hf.write_checkpoint(gsa_dir, hf.preset_config("gsa"))
        hf.write_checkpoint(wide, hf.preset_config("llama", head_dim=32))  # 4 heads x 32 != 64
        hf.write_checkpoint(biased, hf.preset_config("llama", attention_bias=True))
        cases = [
            ((str(gsa_dir), "t2r"), "'model_type' 'gsa' is not a supported source architecture"),
            ((str(self.tmp / "missing"), "t2r"), "config.json"),
            ((str(self.source), "abc", "--layers", "2"), "--layers: index 2 is out of range"),
            ((str(self.source), "abc", "--layers", "x"), "--layers"),
            ((str(wide), "t2r"), "'head_dim' 32"),
            ((str(wide), "gsa"), "value_dim"),
            ((str(biased), "gsa"), "'attention_bias'"),
            ((str(self.source), "t2r", "--features", "0"), "--features"),
            ((str(self.source), "t2r", "--distill", "2"), "--distill"),
        ]
        for (source, target, *rest), field in cases:
            with self.subTest(field=field):
                code, err = run_convert("--from-hf", source, "--to", target, "--out", str(self.tmp / "x"), *rest)
                self.assertEqual(code, 2)
                self.assertIn(field, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        hf.write_checkpoint(self.tmp / "no-tok", hf.preset_config("llama"))
        code, err = run_convert("--from-hf", str(self.tmp / "no-tok"), "--to", "t2r", "--out", str(self.tmp / "x"), "--max-tokens", "64")
        self.assertEqual(code, 2)
        self.assertIn("--max-tokens", err)


class GsaChunkedTest(unittest.TestCase):
    def test_chunked_equals_naive(self):
        config = hf.preset_config("gsa", num_kv_heads=2)
        with tempfile.TemporaryDirectory() as tmp:
            hf.write_checkpoint(tmp, config, seed=11)  # wide gate logits: saturated and open slots
            model, _ = hf.load_checkpoint(tmp)
        model = model.double()
        tokens = ids(37, seed=2)
        naive = model(tokens)
        for layer in model.model.layers:
            layer.attn.chunk = 8
        torch.testing.assert_close(model(tokens), naive, rtol=0, atol=1e-10)
        u = torch.randn(1, 5, 2, 3, dtype=torch.float64)
        f = -torch.rand(1, 5, 2, 4, dtype=torch.float64)
        self.assertEqual(gsa_chunked(u, u, u, f, 2).shape, (1, 5, 2, 3))


@unittest.skipUnless(HAVE_DATA, "models/data/out/ not built (models/data/build_corpora.sh)")
class FinetuneTest(unittest.TestCase):
    def test_attention_only_distill_and_resume(self):
        torch.manual_seed(0)
        config = hf.preset_config("llama", vocab_size=8000, num_hidden_layers=1, hidden_size=32, intermediate_size=32, num_attention_heads=2)
        teacher = hf.build_model(config)
        hf_train.init_weights(teacher)
        cfg, tensors = config, dict(teacher.state_dict())
        out_cfg, out = convert_hf.convert(cfg, tensors, "t2r", [0], features=4)
        tc = trainer.TrainConfig(steps=10**9, max_tokens=64, batch_size=2, seq_len=16, warmup=1, eval_every=0, final_eval_batches=1, threads=1)
        with tempfile.TemporaryDirectory() as tmp:
            model = hf.build_model(out_cfg)
            model.load_state_dict(convert_hf.model_state(model, out))
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            quiet = lambda text: None  # noqa: E731
            args = dict(teacher=teacher, distill=0.5, trainable=convert_hf.attention_parameter, dtype="f32", log=quiet)
            summary = hf_train.train_hf(model, out_cfg, tc, tmp, **args)
            self.assertEqual(summary["steps_done"], 2)
            for name, p in model.named_parameters():
                self.assertEqual(torch.equal(p, before[name]), ".self_attn." not in name, name)
            self.assertGreater(summary["history"]["train"][0]["kl"], 0.0)
            resumed = hf_train.train_hf(hf.build_model(out_cfg), out_cfg, tc, tmp, **args)  # nothing left to do
            self.assertEqual(resumed["steps_done"], 2)
            self.assertEqual(resumed["final_valid_loss"], summary["final_valid_loss"])
            tc.max_tokens = 96
            with self.assertRaises(hf_train.ResumeError):
                hf_train.train_hf(hf.build_model(out_cfg), out_cfg, tc, tmp, **args)
            loaded = logits(tmp, ids(8, vocab=8000))  # the written directory loads
            self.assertTrue(torch.isfinite(loaded).all())


WORDS = ("the cat dog bird sat ran flew on under over a big small red blue house tree river "
         "and then quickly slowly morning night").split()  # fmt: skip


def sentences(n, seed):
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(WORDS), (n, 8), generator=g)
    return [" ".join(WORDS[i] for i in row) + "." for row in picks.tolist()]


class OwnTokenizerFinetuneTest(unittest.TestCase):
    """Issue 46: --from-hf finetunes a source whose tokenizer is not the repository's, on the user's
    own text (--train-text), tokenised with the source's tokenizer."""

    @classmethod
    def setUpClass(cls):
        import sentencepiece as spm

        cls.tmp_dir = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls.tmp_dir.name)
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences(400, 1)), model_writer=model, vocab_size=90, model_type="bpe",
                                       unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)  # fmt: skip
        cls.tokenizer = cls.tmp / "own.model"
        cls.tokenizer.write_bytes(model.getvalue())
        cls.text = cls.tmp / "train.txt"
        cls.text.write_text("\n".join(sentences(600, 2)) + "\n")
        cls.source = cls.tmp / "source"
        config = hf.preset_config("llama", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=16)  # fmt: skip
        hf.write_checkpoint(cls.source, config, seed=3, tokenizer=cls.tokenizer)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_dir.cleanup()

    def test_windows_are_the_source_tokenizers_ids(self):
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(self.tokenizer))
        train_w, valid_w = hf_train.lm_data(16, 1, self.tokenizer, [self.text])
        first = sentences(600, 2)[0]
        expected = [1] + sp.encode(first)
        self.assertEqual(train_w[0, : len(expected)].tolist(), expected)
        self.assertEqual(len(valid_w), (len(train_w) + len(valid_w)) // 20)  # every 20th held out
        jsonl = self.tmp / "train.jsonl"
        jsonl.write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(sentences(600, 2))) + "\n")
        from_jsonl, _ = hf_train.lm_data(16, 1, self.tokenizer, [jsonl])
        self.assertTrue(torch.equal(from_jsonl, train_w))

    def test_convert_finetunes_on_train_text_and_keeps_the_tokenizer(self):
        out = self.tmp / "gsa"
        code, err = run_convert("--from-hf", str(self.source), "--to", "gsa", "--out", str(out), "--train-text", str(self.text),
                                "--max-tokens", "12800", "--set", "seq_len=16", "--dtype", "float32")  # fmt: skip
        self.assertIsNone(code, err)
        self.assertEqual((out / "tokenizer.model").read_bytes(), self.tokenizer.read_bytes())
        self.assertEqual(json.loads((out / "config.json").read_text())["vocab_size"], 90)
        log = json.loads((out / "train_log.json").read_text())
        self.assertEqual(log["train_text"], [str(self.text)])
        first, last = log["history"]["train"][0], log["history"]["train"][-1]
        self.assertEqual(last["step"], 50)
        self.assertLess(last["ce"], first["ce"] - 0.5)  # it learned the text
        self.assertTrue(torch.isfinite(logits(out, ids(8, vocab=90))).all())  # the directory loads

    def test_bad_text_is_one_line_naming_the_file_or_flag(self):
        bad = self.tmp / "bad.jsonl"
        bad.write_text('{"text": "a"}\n{"txt": "b"}\n')
        tiny = self.tmp / "tiny.txt"
        tiny.write_text("the cat.\n")
        json_only = self.tmp / "json-only"
        hf.write_checkpoint(json_only, hf.preset_config("llama"))
        (json_only / "tokenizer.json").write_text("{}")  # read by the engine: the BPE vocab is missing
        cases = [
            ((str(self.source), "--train-text", str(self.tmp / "missing.txt")), "missing.txt: not found"),
            ((str(self.source), "--train-text", str(bad)), 'bad.jsonl:2: a JSONL record needs a string "text" field'),
            ((str(self.source), "--train-text", str(tiny)), "--train-text: too little text"),
            ((str(self.source), "--valid-text", str(self.text)), "--valid-text needs --train-text"),
            ((str(json_only), "--train-text", str(self.text)), "tokenizer.json: model.vocab: missing"),
        ]
        if not HAVE_DATA:
            cases.append(((str(self.source),), "build the bundled corpus with models/data/build_corpora.sh"))
        for (source, *rest), message in cases:
            with self.subTest(message=message):
                code, err = run_convert("--from-hf", source, "--to", "gsa", "--out", str(self.tmp / "x"), "--max-tokens", "64", *rest)
                self.assertEqual(code, 2)
                self.assertIn(message, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        code, err = run_convert("--from-hf", str(self.source), "--to", "gsa", "--out", str(self.tmp / "x"), "--train-text", str(self.text))
        self.assertEqual(code, 2)
        self.assertIn("--train-text needs --max-tokens", err)


FIXTURES = ROOT.parent / "tests" / "fixtures" / "tokenizer_json"


@unittest.skipUnless(os.environ.get("ABCD_CLI") or hf_train.ABCD_CLI.exists(), "abcd-cli not built (ctest sets $ABCD_CLI)")
class TokenizerJsonFinetuneTest(unittest.TestCase):
    """--from-hf finetunes a source whose only tokenizer is a tokenizer.json (the llama3 fixture, a
    byte-level BPE whose post-processor adds <|begin_of_text|>), tokenised by abcd-cli tokenize:
    the documents' ids are Hugging Face's tokenizers' (npm, the fixture's reference), bos included."""

    @classmethod
    def setUpClass(cls):
        cls.tmp_dir = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls.tmp_dir.name)
        cls.source = cls.tmp / "source"
        config = hf.preset_config("llama", vocab_size=1024, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, bos_token_id=956, eos_token_id=957)  # fmt: skip
        hf.write_checkpoint(cls.source, config, seed=5)
        shutil.copyfile(FIXTURES / "llama3.tokenizer.json", cls.source / "tokenizer.json")
        (cls.source / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}))
        cls.expected = json.loads((FIXTURES / "llama3.expected.json").read_text())["cases"]
        cls.text = cls.tmp / "train.jsonl"
        cls.text.write_text("".join(json.dumps({"text": t}) + "\n" for t in sentences(300, 2)))

    @classmethod
    def tearDownClass(cls):
        cls.tmp_dir.cleanup()

    def test_documents_get_the_reference_ids(self):
        documents = [case["text"] for case in self.expected]
        encoded = hf_train.encode_documents(self.source, documents, bos_id=1)  # bos_id: SentencePiece only
        for case, ids in zip(self.expected, encoded, strict=True):
            self.assertEqual(ids, case["ids_with_special_tokens"], case["text"])
        records = self.tmp / "cases.jsonl"
        records.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents))
        train_w, _ = hf_train.lm_data(4, 1, self.source, [records], [records])  # the windows are those ids
        stream = [i for ids in encoded for i in ids]
        self.assertEqual(train_w[:, :-1].reshape(-1).tolist(), stream[: train_w.numel() - len(train_w)])

    def test_convert_finetunes_and_keeps_the_tokenizer(self):
        out = self.tmp / "t2r"
        code, err = run_convert("--from-hf", str(self.source), "--to", "t2r", "--features", "8", "--out", str(out), "--train-text",
                                str(self.text), "--max-tokens", "2560", "--set", "seq_len=16", "--dtype", "float32")  # fmt: skip
        self.assertIsNone(code, err)
        self.assertEqual((out / "tokenizer.json").read_bytes(), (self.source / "tokenizer.json").read_bytes())
        self.assertFalse((out / "tokenizer.model").exists())
        self.assertEqual(json.loads((out / "config.json").read_text())["vocab_size"], 1024)
        log = json.loads((out / "train_log.json").read_text())
        self.assertEqual(log["steps_done"], 10)
        self.assertTrue(torch.isfinite(logits(out, ids(8, vocab=964))).all())  # the directory loads

    def test_missing_abcd_cli_and_oversized_tokenizer_are_one_line(self):
        small = self.tmp / "small-vocab"
        shutil.copytree(self.source, small)
        config = json.loads((small / "config.json").read_text())
        (small / "config.json").write_text(json.dumps({**config, "vocab_size": 900}))
        cases = [
            ((str(self.source), "--abcd-cli", str(self.tmp / "no-cli")), "no-cli: no abcd-cli there"),
            ((str(small),), "has 964 pieces, more than the source's vocab_size 900"),
        ]
        for (source, *rest), message in cases:
            with self.subTest(message=message):
                code, err = run_convert("--from-hf", source, "--to", "t2r", "--out", str(self.tmp / "x"), "--max-tokens", "64",
                                        "--train-text", str(self.text), *rest)  # fmt: skip
                self.assertEqual(code, 2)
                self.assertIn(message, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    unittest.main()
