"""Write same-size random benchmark models, one per attention type, for abcd-bench.

  /usr/bin/python3 loadtest/make_bench_models.py [--out build/bench-models] [--types ...]
      [--size lm|gpu|seq2seq] [--dtype float32|bfloat16]

Every model has one size and differs only in its attention. `--size lm` (default, the CPU
benchmarks): d_model 256, 4 heads, d_ff 1024, 4 decoder layers; `--size gpu` (abcd-bench-cuda):
d_model 1024, 16 heads, d_ff 4096, 24 decoder layers (about 310M parameters), big enough that
a decode step is bound by memory rather than by kernel launches. Vocabulary of the LM
tokenizer. Attention, with the presets' settings: softmax; window (256 tokens); abc (32 slots); rfa
(32 gaussian features, gated); t2r (32 features); elu; txl (Transformer-XL, memory 255 so its
ring of 256 keys/values per layer has the window's bytes; clamp 255; Dai's model: positional
"none", post-LN; CPU only: not in the --size gpu default). Weights are random (abcd_ref.build_model,
fixed seed), fp32, exported with abcd_ref.export together with models/tokenizers/lm.model, so
abcd-server can serve them too. The output directory is build output: not committed.

`--size seq2seq` (abcd-bench seq2seq, the seeds' decode-speed figure; default output
build/bench-models-seq2seq): encoder-decoder models of transformer-base size (6 + 6 layers,
d_model 512, 8 heads, d_ff 2048), the MT tokenizer's vocabulary, softmax encoder, and the
memory sizes of ABC (Peng et al. 2022, Fig. 1) in the decoder, cross / causal: softmax; abc 32 / 8
slots; rfa 256 / 128 (gaussian, features D = 128 / 64, phi = [sin, cos] of 2D; causal gated,
as the seeds' MT models); t2r 32 / 4 features.
"""

import argparse
import sys
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))
from abcd_ref import AttentionSpec, LayerSpec, ModelConfig, build_model, export  # noqa: E402

SIZES = {
    "lm": dict(d_model=256, n_heads=4, d_ff=1024, layers=4),
    "gpu": dict(d_model=1024, n_heads=16, d_ff=4096, layers=24),
}
ATTENTION = {
    "softmax": dict(type="softmax"),
    "window": dict(type="window", window=256),
    "abc": dict(type="abc", slots=32),
    "rfa": dict(type="rfa", features=32, kernel="gaussian", gate=True),
    "t2r": dict(type="t2r", features=32),
    "elu": dict(type="elu"),
    "txl": dict(type="txl", memory=255, clamp_len=255),
}
# Model-level fields per type (Transformer-XL: no absolute positions, post-LN blocks).
MODEL_FIELDS = {"txl": dict(positional="none", norm="post")}
# Types with no CUDA kernel, left out of the --size gpu default.
CPU_ONLY = {"txl"}
# (causal, cross) attention of the seq2seq models' decoder layers.
SEQ2SEQ_ATTENTION = {
    "softmax": (dict(type="softmax"), dict(type="softmax")),
    "abc": (dict(type="abc", slots=8), dict(type="abc", slots=32)),
    "rfa": (dict(type="rfa", features=64, kernel="gaussian", gate=True), dict(type="rfa", features=128, kernel="gaussian")),
    "t2r": (dict(type="t2r", features=4), dict(type="t2r", features=32)),
}
SEQ2SEQ_SIZE = dict(d_model=512, n_heads=8, d_ff=2048, layers=6)
TOKENIZER = ROOT / "models" / "tokenizers" / "lm.model"
MT_TOKENIZER = ROOT / "models" / "tokenizers" / "mt.model"
SEED = 20250101


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default build/bench-models (build/bench-models-seq2seq for --size seq2seq)")
    parser.add_argument("--types", help="comma-separated subset of " + ",".join(ATTENTION) + " (seq2seq: " + ",".join(SEQ2SEQ_ATTENTION) + "); default all")
    parser.add_argument("--tokenizer", help=f"default {TOKENIZER.name} ({MT_TOKENIZER.name} for --size seq2seq)")
    parser.add_argument("--size", choices=sorted([*SIZES, "seq2seq"]), default="lm")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    if args.size == "seq2seq":
        return make_seq2seq(args)
    args.out = args.out or str(ROOT / "build" / "bench-models")
    args.tokenizer = args.tokenizer or str(TOKENIZER)
    args.types = args.types or ",".join(t for t in ATTENTION if args.size != "gpu" or t not in CPU_ONLY)
    size = SIZES[args.size]

    vocab = spm.SentencePieceProcessor(model_file=args.tokenizer).get_piece_size()
    for name in args.types.split(","):
        spec = ATTENTION[name]
        config = ModelConfig(
            vocab_size=vocab,
            d_model=size["d_model"],
            n_heads=size["n_heads"],
            d_ff=size["d_ff"],
            decoder_layers=[LayerSpec(AttentionSpec(**spec)) for _ in range(size["layers"])],
            bos_id=1,
            eos_id=2,
            pad_id=0,
            unk_id=3,
            **MODEL_FIELDS.get(name, {}),
        )
        model = build_model(config, seed=SEED)
        out = Path(args.out) / name
        export(model, config, out, dtype=args.dtype, tokenizer_path=args.tokenizer)
        params = sum(p.numel() for p in model.state_dict().values())
        print(f"wrote {out} ({name}: {params / 1e6:.2f}M parameters)")


def make_seq2seq(args):
    out_dir = Path(args.out or ROOT / "build" / "bench-models-seq2seq")
    tokenizer = args.tokenizer or str(MT_TOKENIZER)
    vocab = spm.SentencePieceProcessor(model_file=tokenizer).get_piece_size()
    size = SEQ2SEQ_SIZE
    for name in (args.types or ",".join(SEQ2SEQ_ATTENTION)).split(","):
        if name not in SEQ2SEQ_ATTENTION:
            sys.exit(f"--types: unknown seq2seq type {name!r} (expected one of {','.join(SEQ2SEQ_ATTENTION)})")
        causal, cross = SEQ2SEQ_ATTENTION[name]
        config = ModelConfig(
            vocab_size=vocab,
            architecture="encoder-decoder",
            d_model=size["d_model"],
            n_heads=size["n_heads"],
            d_ff=size["d_ff"],
            decoder_layers=[LayerSpec(AttentionSpec(**causal), AttentionSpec(**cross)) for _ in range(size["layers"])],
            encoder_layers=[LayerSpec(AttentionSpec(type="softmax")) for _ in range(size["layers"])],
            bos_id=1,
            eos_id=2,
            pad_id=0,
            unk_id=3,
        )
        config.validate()
        model = build_model(config, seed=SEED)
        out = out_dir / name
        export(model, config, out, dtype=args.dtype, tokenizer_path=tokenizer)
        params = sum(p.numel() for p in model.state_dict().values())
        print(f"wrote {out} ({name} seq2seq: {params / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
