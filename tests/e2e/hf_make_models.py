"""Writes the tiny Hugging Face-layout models the HF serving e2e test serves, with the bundled LM
tokenizer (models/tokenizers/lm.model), through the repo's writer models/write_hf_checkpoint.py.

Usage: /usr/bin/python3 tests/e2e/hf_make_models.py OUT_DIR
  OUT_DIR/gsa    GSA, 2 layers, 4 heads, 8 slots, fp32, one model.safetensors
  OUT_DIR/llama  Llama with GQA (4 query heads, 2 key/value heads), bf16, 2 shards + index, and a
                 vocab_size of 8064 for the 8000-piece tokenizer (an embedding padded to a multiple
                 of 128, as Hugging Face models often are: ids 8000..8063 have no text)
  OUT_DIR/llama_t2r  that Llama converted by models/convert.py --from-hf --to t2r --layers 1
                 (layer 0 keeps softmax: an abcd_llama hybrid), untrained, as a user converts one
"""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

import convert  # noqa: E402
import write_hf_checkpoint  # noqa: E402

TOKENIZER = str(ROOT / "models" / "tokenizers" / "lm.model")


def main(out_dir):
    out = Path(out_dir)
    write_hf_checkpoint.main(["--type", "gsa", "--preset", "tiny", "--seed", "1", "--tokenizer", TOKENIZER,
                              "--out", str(out / "gsa")])  # fmt: skip
    # The writer's --tokenizer sets vocab_size to the tokenizer's: pad it, then copy the files.
    write_hf_checkpoint.main(["--type", "llama", "--preset", "tiny", "--seed", "2", "--num-kv-heads", "2",
                              "--dtype", "bf16", "--shards", "2", "--set", "vocab_size=8064",
                              "--set", "pad_token_id=0", "--out", str(out / "llama")])  # fmt: skip
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(out / "gsa" / name, out / "llama" / name)
    convert.main(["--from-hf", str(out / "llama"), "--to", "t2r", "--layers", "1", "--features", "16",
                  "--out", str(out / "llama_t2r")])  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
