"""Writes the tiny Hugging Face-layout models the HF serving e2e test serves, with the bundled LM
tokenizer (models/tokenizers/lm.model), through the repo's writer models/write_hf_checkpoint.py.

Usage: /usr/bin/python3 tests/e2e/hf_make_models.py OUT_DIR
  OUT_DIR/gsa    GSA, 2 layers, 4 heads, 8 slots, fp32, one model.safetensors
  OUT_DIR/llama  Llama with GQA (4 query heads, 2 key/value heads), bf16, 2 shards + index
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

import write_hf_checkpoint  # noqa: E402

TOKENIZER = str(ROOT / "models" / "tokenizers" / "lm.model")


def main(out_dir):
    out = Path(out_dir)
    write_hf_checkpoint.main(["--type", "gsa", "--preset", "tiny", "--seed", "1", "--tokenizer", TOKENIZER,
                              "--out", str(out / "gsa")])  # fmt: skip
    write_hf_checkpoint.main(["--type", "llama", "--preset", "tiny", "--seed", "2", "--num-kv-heads", "2",
                              "--dtype", "bf16", "--shards", "2", "--tokenizer", TOKENIZER,
                              "--out", str(out / "llama")])  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
