"""Build the untrained placeholder default models under models/checkpoints/.

A SentencePiece unigram tokenizer (vocab 1000) trained on the GPL-3 text shipped with Debian, and
with random, seeded weights: abc-lm-untrained/ (DecoderLM, 4 abc layers of 32 slots) and
abc-mt-untrained/ (encoder-decoder: 2 softmax encoder layers; 2 decoder layers with causal abc of
8 slots and abc cross attention of 32 slots). Deterministic.
Usage (from the repository root): /usr/bin/python3 models/make_default_model.py
`make_default_model.py gmat` writes only gmat-mt-untrained/ (issue 16: a tiny GMAT encoder-decoder
for the served-translation tests, reusing abc-mt-untrained's tokenizer).
"""

import io
import sys
import tempfile
from pathlib import Path

import sentencepiece as spm

from abcd_ref import AttentionSpec, LayerSpec, ModelConfig, build_model, export
from abcd_ref.config import GmatSpec

OUT_DIR = Path(__file__).resolve().parent / "checkpoints" / "abc-lm-untrained"
MT_OUT_DIR = Path(__file__).resolve().parent / "checkpoints" / "abc-mt-untrained"
GMAT_OUT_DIR = Path(__file__).resolve().parent / "checkpoints" / "gmat-mt-untrained"
TOKENIZER_TEXT = "/usr/share/common-licenses/GPL-3"
VOCAB_SIZE = 1000
SEED = 20240601


def train_tokenizer():
    """Serialized SentencePiece unigram model (single-threaded, hence deterministic)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=TOKENIZER_TEXT,
        model_writer=model,
        model_type="unigram",
        vocab_size=VOCAB_SIZE,
        num_threads=1,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        minloglevel=2,
    )
    return model.getvalue()


def main():
    config = ModelConfig(
        vocab_size=VOCAB_SIZE,
        d_model=128,
        n_heads=4,
        d_ff=512,
        decoder_layers=[LayerSpec(AttentionSpec(type="abc", slots=32)) for _ in range(4)],
        bos_id=1,
        eos_id=2,
        pad_id=0,
        unk_id=3,
    )
    model = build_model(config, seed=SEED)
    mt_config = ModelConfig(
        architecture="encoder-decoder",
        vocab_size=VOCAB_SIZE,
        d_model=128,
        n_heads=4,
        d_ff=512,
        encoder_layers=[LayerSpec(AttentionSpec(type="softmax")) for _ in range(2)],
        decoder_layers=[
            LayerSpec(AttentionSpec(type="abc", slots=8), AttentionSpec(type="abc", slots=32))
            for _ in range(2)
        ],
        bos_id=1,
        eos_id=2,
        pad_id=0,
        unk_id=3,
    )
    mt_model = build_model(mt_config, seed=SEED + 1)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_path = Path(tmp) / "tokenizer.model"
        tokenizer_path.write_bytes(train_tokenizer())
        export(model, config, OUT_DIR, dtype="float32", tokenizer_path=tokenizer_path)
        export(mt_model, mt_config, MT_OUT_DIR, dtype="float32", tokenizer_path=tokenizer_path)
    print(f"wrote {OUT_DIR} and {MT_OUT_DIR}")


def main_gmat():
    """gmat-mt-untrained: d_model 32 (small files), 2 gmat encoder layers (chunk 8) with 8 memory
    tokens, decoder 2 layers of softmax self and softmax cross attention over the 8 memory rows."""
    config = ModelConfig(
        architecture="encoder-decoder",
        vocab_size=VOCAB_SIZE,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=[LayerSpec(AttentionSpec(type="gmat", chunk=8)) for _ in range(2)],
        decoder_layers=[LayerSpec(AttentionSpec(type="softmax"), AttentionSpec(type="softmax")) for _ in range(2)],
        gmat=GmatSpec(memory=8),
        bos_id=1,
        eos_id=2,
        pad_id=0,
        unk_id=3,
    )
    export(build_model(config, seed=SEED + 2), config, GMAT_OUT_DIR, dtype="float32", tokenizer_path=MT_OUT_DIR / "tokenizer.model")
    print(f"wrote {GMAT_OUT_DIR}")


if __name__ == "__main__":
    if sys.argv[1:] == ["gmat"]:
        main_gmat()
    else:
        main()
