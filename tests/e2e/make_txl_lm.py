"""Writes a small untrained Transformer-XL LM (Dai's form: post-LN, no absolute positions) with the
bundled LM tokenizer, for the end-to-end tests.

Usage: /usr/bin/python3 tests/e2e/make_txl_lm.py OUT_DIR
Two txl layers with memory 6 (a ring of 7 keys and values) and clamp 4, so any prompt of more than
7 tokens wraps the ring during prefill and every decode step after it reads a full ring.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

from abcd_ref import LayerSpec, ModelConfig, build_model, export  # noqa: E402
from abcd_ref.config import AttentionSpec  # noqa: E402

LM = ROOT / "models" / "checkpoints" / "abc-lm-untrained"


def main(out_dir):
    vocab = json.loads((LM / "config.json").read_text())["vocab_size"]
    txl = AttentionSpec(type="txl", memory=6, clamp_len=4)
    config = ModelConfig(
        vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, positional="none", norm="post",
        decoder_layers=[LayerSpec(txl), LayerSpec(txl)],
    )
    export(build_model(config, seed=1), config, out_dir, dtype="float32", tokenizer_path=LM / "tokenizer.model")


if __name__ == "__main__":
    main(sys.argv[1])
