"""Writes a small untrained encoder-decoder with the Linformer (abc position) in the encoder,
the cross attention and the decoder, with the bundled MT tokenizer, for the end-to-end tests.

Usage: /usr/bin/python3 tests/e2e/make_linformer_mt.py OUT_DIR
Tables: encoder [3, 16], cross [5, 12] (so sources of more than 12 tokens with eos are refused),
decoder [4, 64].
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

from abcd_ref import LayerSpec, ModelConfig, build_model, export  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402

MT = ROOT / "models" / "checkpoints" / "abc-mt-untrained"


def position(slots, n):
    return AttentionSpec(type="abc", slots=slots, control="position", max_positions=n)


def main(out_dir):
    vocab = json.loads((MT / "config.json").read_text())["vocab_size"]
    config = ModelConfig(
        vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, architecture="encoder-decoder",
        encoder_layers=[LayerSpec(position(3, 16)), LayerSpec(AttentionSpec(type="softmax"))],
        decoder_layers=[LayerSpec(position(4, 64), position(5, 12))],
    )
    export(build_model(config, seed=1), config, out_dir, dtype="float32", tokenizer_path=MT / "tokenizer.model")


if __name__ == "__main__":
    main(sys.argv[1])
