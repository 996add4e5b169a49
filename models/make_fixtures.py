"""Generate the golden parity fixtures for the C++ engine into tests/fixtures/golden/<name>/.

Each fixture has config.json, model.safetensors (fp32) and golden.safetensors with
prompt_ids [12], source_ids [10] (encoder-decoder), prefill_logits [12, V] (parallel form),
decode_ids [32] and decode_logits [32, V] (recurrent form, continuing after the prompt); GMAT
fixtures also encoder_output [rows, d] (the M memory rows, or source + memory rows).
HF fixtures (HF_FIXTURES, names hf_*) hold an HF-layout checkpoint written by abcd_ref.hf (config.json,
model.safetensors or shards + index, possibly bf16 or a legacy fla layout) instead; their prompt starts
with bos and every logits row comes from the recurrent form of the model read back from those files.
They also hold greedy_ids [64] and greedy_logprobs [64]: the float64 reference's own greedy
continuation of the prompt (argmax of each step's logits, fed back) and each chosen id's log-probability.
Deterministic: fixed seeds. Usage (from the repository root): /usr/bin/python3 models/make_fixtures.py
[NAME ...] (only the named fixtures; index.json always lists them all)
"""

import json
import sys
import zlib
from pathlib import Path

import torch

from abcd_ref import LayerSpec, ModelConfig, build_model, export
from abcd_ref import hf
from abcd_ref.config import AttentionSpec, GmatSpec
from abcd_ref.safetensors_io import save_file

OUT_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "golden"
PROMPT_LEN, SOURCE_LEN, DECODE_LEN = 12, 10, 32
GREEDY_LEN = 64  # HF fixtures: free-running greedy steps after the prompt
FIRST_PLAIN_ID = 4  # random ids avoid pad 0, bos 1, eos 2, unk 3
TOLERANCE = 1e-4

SOFTMAX = {"type": "softmax"}
ABC4 = {"type": "abc", "slots": 4}
T2R8 = {"type": "t2r", "features": 8}
RFA_GAUSSIAN_GATE8 = {"type": "rfa", "features": 8, "kernel": "gaussian", "gate": True}


def decoder(*self_specs, **overrides):
    return dict(decoder_layers=[LayerSpec(AttentionSpec(**s)) for s in self_specs], **overrides)


def encoder_decoder(encoder_specs, decoder_specs, **overrides):
    """decoder_specs: (self attention, cross attention) per layer."""
    return dict(
        **overrides,
        architecture="encoder-decoder",
        encoder_layers=[LayerSpec(AttentionSpec(**s)) for s in encoder_specs],
        decoder_layers=[LayerSpec(AttentionSpec(**s), AttentionSpec(**c)) for s, c in decoder_specs],
    )


FIXTURES = {
    "dec_softmax": decoder(SOFTMAX, SOFTMAX),
    "dec_window": decoder(*[{"type": "window", "window": 4}] * 2),
    "dec_abc": decoder(ABC4, ABC4),
    "dec_abc_shared": decoder(*[{"type": "abc", "slots": 4, "shared_control": True}] * 2),
    "dec_rfa_gaussian_gate": decoder(RFA_GAUSSIAN_GATE8, RFA_GAUSSIAN_GATE8),
    "dec_rfa_arccos": decoder(*[{"type": "rfa", "features": 8, "kernel": "arccos", "gate": False}] * 2),
    "dec_t2r": decoder(T2R8, T2R8),
    "dec_elu": decoder(*[{"type": "elu"}] * 2),
    # Also covers the non-default flags: relu, untied lm_head, unscaled embeddings.
    "dec_mixed": decoder(ABC4, SOFTMAX, activation="relu", tie_embeddings=False, scale_embeddings=False),
    "encdec_abc": encoder_decoder([SOFTMAX] * 2, [(ABC4, {"type": "abc", "slots": 6})] * 2),
    "encdec_softmax": encoder_decoder([SOFTMAX] * 2, [(SOFTMAX, SOFTMAX)] * 2),
    "encdec_mixed": encoder_decoder([ABC4, {"type": "elu"}], [(T2R8, SOFTMAX), (RFA_GAUSSIAN_GATE8, ABC4)]),
    # Generalised abc control (issue 15). The fixture init draws control biases ~ N(0, 1), so relu
    # leaves some slots dead for the first tokens and random (n = 4) fills its slots over the
    # first tokens: both exercise the never-written-slot guard.
    "dec_abc_sigmoid": decoder(*[{"type": "abc", "slots": 4, "control": "sigmoid"}] * 2),
    "dec_abc_relu": decoder(*[{"type": "abc", "slots": 4, "control": "relu"}] * 2),
    "dec_abc_random": decoder(
        {"type": "abc", "slots": 4, "control": "random", "seed": 1234},
        {"type": "abc", "slots": 6, "control": "random", "seed": 99, "reduce": "sum"},
    ),
    "encdec_abc_control": encoder_decoder(
        [{"type": "abc", "slots": 4, "control": "relu"}, {"type": "abc", "slots": 4, "control": "random", "seed": 7}],
        [
            ({"type": "abc", "slots": 4, "control": "sigmoid"}, {"type": "abc", "slots": 6, "control": "random", "seed": 5}),
            (
                {"type": "abc", "slots": 4, "control": "random", "seed": 3, "reduce": "sum"},
                {"type": "abc", "slots": 4, "control": "relu"},
            ),
        ],
    ),
    # Issue 15, part 2: causal Linformer (position), compressive mean pooling (block; 44 tokens
    # evict blocks in both rings) and online k-means (cluster; self, encoder and cross).
    "dec_abc_position": decoder(*[{"type": "abc", "slots": 4, "control": "position", "max_positions": 64}] * 2),
    "dec_abc_block": decoder(
        {"type": "abc", "slots": 3, "control": "block", "block": 4},
        {"type": "abc", "slots": 2, "control": "block", "block": 3},
    ),
    "dec_abc_cluster": decoder(*[{"type": "abc", "slots": 4, "control": "cluster"}] * 2),
    "encdec_abc_cluster": encoder_decoder(
        [{"type": "abc", "slots": 4, "control": "cluster"}, SOFTMAX],
        [({"type": "abc", "slots": 4, "control": "cluster"}, {"type": "abc", "slots": 3, "control": "cluster"})] * 2,
    ),
    # Feature-map cross attention (issue 15, thesis Alg. 5): rfa / t2r / elu in decoder cross and
    # causal attention as in the seeds' MT models (encoder softmax); rfa covers both kernels.
    "encdec_rfa_cross": encoder_decoder(
        [SOFTMAX] * 2,
        [
            (RFA_GAUSSIAN_GATE8, {"type": "rfa", "features": 8, "kernel": "gaussian"}),
            (RFA_GAUSSIAN_GATE8, {"type": "rfa", "features": 6, "kernel": "arccos"}),
        ],
    ),
    "encdec_t2r_cross": encoder_decoder([SOFTMAX] * 2, [({"type": "t2r", "features": 4}, T2R8)] * 2),
    "encdec_elu_cross": encoder_decoder([SOFTMAX] * 2, [({"type": "elu"}, {"type": "elu"})] * 2),
    # Dilated window (ABC-I App. A.4): 44 tokens run many times round the rings of 7 and 11 keys.
    "dec_window_dilated": decoder({"type": "window", "window": 4, "dilation": 2}, {"type": "window", "window": 3, "dilation": 5}),
    # Linformer (abc position) in its encoder (bidirectional) and cross forms, each stack with its
    # own table (encoder [3, 16], cross [5, 12]; the 10-token source fits both), beside the causal
    # decoder form.
    "encdec_abc_position": encoder_decoder(
        [{"type": "abc", "slots": 3, "control": "position", "max_positions": 16}, SOFTMAX],
        [
            ({"type": "abc", "slots": 4, "control": "position", "max_positions": 64}, {"type": "abc", "slots": 5, "control": "position", "max_positions": 12}),
            (ABC4, {"type": "abc", "slots": 5, "control": "position", "max_positions": 12}),
        ],
    ),
    # Transformer-XL (Dai et al. 2019): Dai's form (post-LN, no absolute positions), 44 tokens
    # round rings of 7 and 10 keys, clamp below and above the memory; and pre-LN with sinusoidal
    # positions beside a softmax layer.
    "dec_txl": decoder({"type": "txl", "memory": 6, "clamp_len": 4}, {"type": "txl", "memory": 9, "clamp_len": 20}, positional="none", norm="post"),
    "dec_txl_pre": decoder({"type": "txl", "memory": 5, "clamp_len": 5}, SOFTMAX),
    # GMAT encoder (Gupta & Berant 2020): full attention among the 10 source tokens, the decoder's
    # softmax cross attention reads the 4 memory vectors only; and chunks of 4 (3 chunks of the
    # 10-token source: the mask matters) with output "all" read by abc cross attention.
    "encdec_gmat": encoder_decoder([{"type": "gmat", "chunk": 0}] * 2, [(SOFTMAX, SOFTMAX)] * 2, gmat=GmatSpec(memory=4)),
    "encdec_gmat_chunk": encoder_decoder(
        [{"type": "gmat", "chunk": 4}] * 2,
        [(ABC4, {"type": "abc", "slots": 3}), (SOFTMAX, SOFTMAX)],
        gmat=GmatSpec(memory=3, output="all"),
    ),
}


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# Issue 24: HF checkpoints (d 64, 2 layers, vocab 96). Keys: type, set (config overrides), drop (config
# keys removed), dtype, shards, legacy (abcd_ref.hf.LEGACY_FEATURES).
HF_FIXTURES = {
    # Llama-2-style config (no head_dim key), MHA, untied, theta 10000.
    "hf_llama": {"type": "llama", "drop": ["head_dim"]},
    # GQA 4/2, head_dim 32 != d/H, llama3 scaling (hd 32, N0 64: all three frequency bands), tied.
    "hf_llama_gqa": {"type": "llama", "set": {"num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True, "rope_scaling": LLAMA3_SCALING}},
    # transformers >= 5 config: rope_parameters only (linear x4, theta 500000), attention and MLP biases.
    "hf_llama_rope_parameters": {
        "type": "llama",
        "set": {"attention_bias": True, "mlp_bias": True, "transformers_version": "5.0.0", "rope_parameters": {"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0}},
        "drop": ["rope_theta", "rope_scaling"],
    },
    "hf_gsa": {"type": "gsa"},  # swish, H 4, M 8, K = V = 16
    "hf_gsa_legacy": {"type": "gsa", "set": {"feature_map": "relu"}, "legacy": ["fused_mlp", "norm_first"]},
    "hf_gsa_gqa_t2r": {"type": "gsa", "set": {"num_kv_heads": 2, "feature_map": "t2r", "tie_word_embeddings": True}},
    "hf_gla": {"type": "gla"},  # output gate, H 4, K 8, V 16
    "hf_gla_legacy": {
        "type": "gla",
        "set": {"num_kv_heads": 2, "clamp_min": -0.5, "feature_map": "relu"},
        "legacy": ["fused_mlp", "g_norm", "embed_tokens"],
    },
    "hf_retnet": {"type": "retnet"},  # H 4, K 16, V 32 (expand_v 2), hidden_ratio 2
    "hf_retnet_nogate": {"type": "retnet", "set": {"use_output_gate": False}},
    "hf_hgrn2": {"type": "hgrn2"},  # expand_ratio 16 -> H 4, K = V = 16, lower bounds
    "hf_gsa_sharded_bf16": {"type": "gsa", "dtype": "bf16", "shards": 3},
    "hf_llama_sharded_bf16": {"type": "llama", "set": {"num_key_value_heads": 2}, "dtype": "bf16", "shards": 3},
    # Issue 29: an fla hybrid (layer 1 softmax attention with RoPE, GQA 4/2, qkv biases) and abcd_llama
    # (Llama projections with abcd's t2r / abc exp mixers, no RoPE; a hybrid keeps a softmax layer).
    "hf_gsa_hybrid": {"type": "gsa", "set": {"attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True, "rope_theta": 10000.0, "window_size": None, "qk_norm": False}}},
    "hf_abcd_llama_t2r": {"type": "abcd_llama", "set": {"abcd_layers": [{"type": "t2r", "features": 8, "eps": 1e-6}] * 2}},
    "hf_abcd_llama_abc": {"type": "abcd_llama", "set": {"attention_bias": True, "abcd_layers": [{"type": "abc", "slots": 8}] * 2}},
    "hf_abcd_llama_hybrid": {"type": "abcd_llama", "set": {"abcd_layers": [{"type": "t2r", "features": 8, "eps": 1e-6}, {"type": "softmax"}]}},
    # Issue 46: Qwen2 (q/k/v biases, none on o_proj; GQA 4/2, tied, theta 1e6, the published configs'
    # use_sliding_window false beside a sliding_window) and bf16 (MQA, untied); Qwen3 (per-head q/k
    # norms before RoPE; head_dim 32 != d/H, GQA, tied) and with attention_bias (biases on all four).
    "hf_qwen2": {"type": "qwen2", "set": {"tie_word_embeddings": True, "rope_theta": 1000000.0, "sliding_window": 4096, "max_window_layers": 28}, "drop": ["head_dim"]},
    "hf_qwen2_bf16": {"type": "qwen2", "set": {"num_key_value_heads": 1, "rope_theta": 1000000.0}, "dtype": "bf16"},
    "hf_qwen3": {"type": "qwen3", "set": {"head_dim": 32, "tie_word_embeddings": True, "rope_theta": 1000000.0}},
    "hf_qwen3_bias": {"type": "qwen3", "set": {"head_dim": 16, "num_key_value_heads": 4, "attention_bias": True}},
    # Mistral's sliding_window (GQA 4/2): 5 keys, so the 12-token prompt and the 44 tokens in all
    # run round the ring many times.
    "hf_mistral_window": {"type": "mistral", "set": {"sliding_window": 5}},
    # Qwen sliding windows as transformers derives them: layers from max_window_layers (1) on slide
    # (qwen2, window 6); qwen3 by layer_types (layer 0 slides, window 4, layer 1 full attention).
    "hf_qwen2_window": {"type": "qwen2", "set": {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1}},
    "hf_qwen3_window": {
        "type": "qwen3",
        "set": {"use_sliding_window": True, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    },
    # fla short convolutions (their last conv_size - 1 inputs in the state): gsa with GQA (silu), gla
    # with conv biases (the layer's conv_bias, 3 taps), hgrn2 (no activation on q/f/i).
    "hf_gsa_conv": {"type": "gsa", "set": {"use_short_conv": True, "conv_size": 4, "num_kv_heads": 2}},
    "hf_gla_conv_bias": {"type": "gla", "set": {"use_short_conv": True, "conv_size": 3, "conv_bias": True}},
    "hf_hgrn2_conv": {"type": "hgrn2", "set": {"use_short_conv": True, "conv_size": 4}},
    # Gated DeltaNet: fla's defaults (short convolutions, output gate; H 2, K 16, V 32), and 4 value
    # heads over 2 q/k heads without convolutions or gate, with negative eigenvalues (beta in (0, 2)).
    "hf_gated_deltanet": {"type": "gated_deltanet"},
    "hf_gated_deltanet_gva": {
        "type": "gated_deltanet",
        "set": {"num_v_heads": 4, "use_short_conv": False, "use_gate": False, "allow_neg_eigval": True},
    },
}


def make_config(fields):
    return ModelConfig(vocab_size=96, d_model=32, n_heads=4, d_ff=64, bos_id=1, eos_id=2, pad_id=0, unk_id=3, **fields)


def run_recurrent(model, tokens, src):
    """Logits [T, V] of the recurrent form fed tokens [T] one at a time."""
    state = model.init_state(1) if src is None else model.init_state(model.encode(src[None]))
    logits = []
    for token in tokens:
        out, state = model.step(token.view(1), state)
        logits.append(out[0])
    return torch.stack(logits)


def run_parallel(model, tokens, src):
    return (model(tokens[None]) if src is None else model(src[None], tokens[None]))[0]


@torch.no_grad()
def make_fixture(name, fields):
    """Write one fixture; returns (max |parallel - recurrent|, max |golden - float64 parallel|)."""
    seed = zlib.crc32(name.encode())
    config = make_config(fields)
    model = build_model(config, seed=seed)
    out = OUT_DIR / name
    export(model, config, out, dtype="float32")
    generator = torch.Generator().manual_seed(seed)

    def random_ids(n):
        return torch.randint(FIRST_PLAIN_ID, config.vocab_size, (n,), generator=generator)

    src = random_ids(SOURCE_LEN) if config.is_encoder_decoder else None
    prompt = random_ids(PROMPT_LEN)
    if config.is_encoder_decoder:
        prompt[0] = config.bos_id
    decode_ids = random_ids(DECODE_LEN)
    tokens = torch.cat([prompt, decode_ids])

    prefill_logits = run_parallel(model, prompt, src)
    recurrent = run_recurrent(model, tokens, src)
    decode_logits = recurrent[PROMPT_LEN:]
    parallel_full = run_parallel(model, tokens, src)
    parity = max((parallel_full - recurrent).abs().max().item(), (prefill_logits - recurrent[:PROMPT_LEN]).abs().max().item())
    exact = run_parallel(model.double(), tokens, src)
    conditioning = (torch.cat([prefill_logits, decode_logits]).double() - exact).abs().max().item()

    golden_tensors = {
        "prompt_ids": prompt.to(torch.int32),
        "prefill_logits": prefill_logits.contiguous(),
        "decode_ids": decode_ids.to(torch.int32),
        "decode_logits": decode_logits.contiguous(),
    }
    if src is not None:
        golden_tensors["source_ids"] = src.to(torch.int32)
    if config.gmat is not None:  # GMAT: the encoder output (memory rows, or source + memory rows)
        golden_tensors["encoder_output"] = model.float().encode(src[None])[0].contiguous()
    save_file(golden_tensors, out / "golden.safetensors")
    return parity, conditioning


@torch.no_grad()
def make_hf_fixture(name, spec):
    """Write one HF fixture; returns (max |parallel - recurrent|, max |golden - float64 recurrent|)."""
    seed = zlib.crc32(name.encode())
    config = hf.preset_config(spec["type"], "tiny", **spec.get("set", {}))
    for key in spec.get("drop", ()):
        config.pop(key)
    out = OUT_DIR / name
    hf.write_checkpoint(out, config, seed=seed, dtype=spec.get("dtype", "f32"), shards=spec.get("shards", 1), legacy=spec.get("legacy", ()))
    model, config = hf.load_checkpoint(out)  # the reference computes with the weights as stored (bf16-rounded)
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(FIRST_PLAIN_ID, config["vocab_size"], (PROMPT_LEN,), generator=generator)
    prompt[0] = config["bos_token_id"]
    decode_ids = torch.randint(FIRST_PLAIN_ID, config["vocab_size"], (DECODE_LEN,), generator=generator)
    tokens = torch.cat([prompt, decode_ids])[None]
    recurrent = hf.run_recurrent(model, tokens)[0][0]
    parity = (model(tokens)[0] - recurrent).abs().max().item()
    exact = hf.run_recurrent(model.double(), tokens)[0][0]
    conditioning = (recurrent.double() - exact).abs().max().item()
    greedy_ids, greedy_logprobs, margin = greedy(model, prompt)  # the float64 model (after .double())
    golden_tensors = {
        "prompt_ids": prompt.to(torch.int32),
        "prefill_logits": recurrent[:PROMPT_LEN].contiguous(),
        "decode_ids": decode_ids.to(torch.int32),
        "decode_logits": recurrent[PROMPT_LEN:].contiguous(),
        "greedy_ids": greedy_ids.to(torch.int32),
        "greedy_logprobs": greedy_logprobs.float().contiguous(),
    }
    save_file(golden_tensors, out / "golden.safetensors")
    if margin < 1e-3:
        print(f"{name}: warning: a greedy step's top two logits are only {margin:.2e} apart")
    return parity, conditioning


def greedy(model, prompt):
    """(ids [GREEDY_LEN], log-probabilities [GREEDY_LEN], smallest top-1 minus top-2 logit gap) of the
    model's greedy continuation of `prompt` (recurrent form)."""
    logits, state = hf.run_recurrent(model, prompt[None])
    last = logits[0, -1]
    ids, logprobs, margin = [], [], float("inf")
    for _ in range(GREEDY_LEN):
        top = last.topk(2).values
        margin = min(margin, (top[0] - top[1]).item())
        token = last.argmax()
        ids.append(token)
        logprobs.append(last.log_softmax(-1)[token])
        last, state = model.step(token.view(1), state)
        last = last[0]
    return torch.stack(ids), torch.stack(logprobs), margin


def main(names=None):
    """Writes every fixture, or only `names` (command-line arguments; the others stay as they are)."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    failed = []
    unknown = sorted(set(names or ()) - set(FIXTURES) - set(HF_FIXTURES))
    if unknown:
        sys.exit(f"unknown fixtures {unknown}")
    jobs = [(name, make_fixture, fields) for name, fields in FIXTURES.items()]
    jobs += [(name, make_hf_fixture, spec) for name, spec in HF_FIXTURES.items()]
    for name, make, fields in jobs:
        if names and name not in names:
            continue
        parity, conditioning = make(name, fields)
        print(f"{name:24s} max|parallel - recurrent| = {parity:.3e}   max|golden - float64| = {conditioning:.3e}")
        if not parity <= TOLERANCE:
            failed.append(name)
    (OUT_DIR / "index.json").write_text(json.dumps(list(FIXTURES) + list(HF_FIXTURES), indent=2) + "\n")
    if failed:
        sys.exit(f"parallel and recurrent forms differ by more than {TOLERANCE} in: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
