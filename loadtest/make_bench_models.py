"""Write same-size random benchmark models, one per attention type, for abcd-bench.

  /usr/bin/python3 loadtest/make_bench_models.py [--out build/bench-models] [--types ...]
      [--size lm|gpu] [--dtype float32|bfloat16]

Every model has one size and differs only in its attention. `--size lm` (default, the CPU
benchmarks): d_model 256, 4 heads, d_ff 1024, 4 decoder layers; `--size gpu` (abcd-bench-cuda):
d_model 1024, 16 heads, d_ff 4096, 24 decoder layers (about 310M parameters), big enough that
a decode step is bound by memory rather than by kernel launches. Vocabulary of the LM
tokenizer. Attention, with the presets' settings: softmax; window (256 tokens); abc (32 slots); rfa
(32 gaussian features, gated); t2r (32 features); elu. Weights are random (abcd_ref.build_model,
fixed seed), fp32, exported with abcd_ref.export together with models/tokenizers/lm.model, so
abcd-server can serve them too. The output directory is build output: not committed.
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
}
TOKENIZER = ROOT / "models" / "tokenizers" / "lm.model"
SEED = 20250101


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "bench-models"))
    parser.add_argument("--types", default=",".join(ATTENTION), help="comma-separated subset of " + ",".join(ATTENTION))
    parser.add_argument("--tokenizer", default=str(TOKENIZER))
    parser.add_argument("--size", choices=sorted(SIZES), default="lm")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
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
        )
        model = build_model(config, seed=SEED)
        out = Path(args.out) / name
        export(model, config, out, dtype=args.dtype, tokenizer_path=args.tokenizer)
        params = sum(p.numel() for p in model.state_dict().values())
        print(f"wrote {out} ({name}: {params / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
