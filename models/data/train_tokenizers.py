#!/usr/bin/env python3
"""Train the abcd SentencePiece tokenizers, deterministically.

  /usr/bin/python3 models/data/train_tokenizers.py          # after build_corpora.sh

Writes
  models/tokenizers/lm.model   unigram, 8000 pieces, on out/lm.train.txt
  models/tokenizers/mt.model   unigram, 8000 pieces, joint EN/DE, on
                               out/mt.train.en + out/mt.train.de
  models/data/out/tokenizer_stats.json   tokens/sentence, tokens/word, unk rate
  (models/data/out/{lm,mt}.{model,vocab} are the trainer's own copies)

Special ids (models/FORMAT.md): pad=0 <pad>, bos=1 <s>, eos=2 </s>, unk=3 <unk>.
byte_fallback is on: text outside the vocabulary becomes <0xNN> byte pieces
instead of <unk>, so the server can encode any UTF-8 prompt losslessly.

Determinism: one thread, every input sentence used (no sampling, no shuffle),
fixed random seed; the same corpus gives byte-identical .model files.
Needs the sentencepiece Python module (Debian: python3-sentencepiece).
"""
import argparse
import json
import os
import shutil
import sys
import time

try:
    import sentencepiece as spm
except ImportError:
    sys.exit("sentencepiece not found: apt-get install python3-sentencepiece "
             "and run with /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_MODELS = os.path.dirname(HERE)
VOCAB_SIZE = 8000
SEED = 20240601

COMMON = dict(
    model_type="unigram",
    vocab_size=VOCAB_SIZE,
    pad_id=0, bos_id=1, eos_id=2, unk_id=3,
    pad_piece="<pad>", bos_piece="<s>", eos_piece="</s>", unk_piece="<unk>",
    byte_fallback=True,
    character_coverage=0.9999,
    normalization_rule_name="nmt_nfkc",
    num_threads=1,
    input_sentence_size=0,          # use every sentence: no random sampling
    shuffle_input_sentence=False,
    max_sentence_length=8192,
    minloglevel=1,
)


def train(name, inputs, data_dir, out_dir):
    """Train in data_dir with relative paths: the .model embeds its trainer
    spec (input names, model_prefix), so absolute or temporary paths would
    make the bytes depend on where the repository is checked out."""
    spm.set_random_generator_seed(SEED)
    cwd = os.getcwd()
    os.chdir(data_dir)
    try:
        t0 = time.time()
        spm.SentencePieceTrainer.train(input=",".join(inputs), model_prefix=name, **COMMON)
        dt = time.time() - t0
        os.makedirs(out_dir, exist_ok=True)
        dst = os.path.join(out_dir, name + ".model")
        shutil.copyfile(name + ".model", dst + ".tmp")
        os.replace(dst + ".tmp", dst)
    finally:
        os.chdir(cwd)
    print(f"{name}.model: trained in {dt:.1f}s -> {dst} ({os.path.getsize(dst)} bytes)")
    return dst, dt


def measure(model, path):
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    ids = sp.encode(lines)
    ntok = sum(len(x) for x in ids)
    nword = sum(len(l.split()) for l in lines)
    unk = sum(x.count(sp.unk_id()) for x in ids)
    byte = sum(1 for x in ids for i in x if sp.is_byte(i))
    lens = sorted(len(x) for x in ids)
    return {
        "sentences": len(lines),
        "words": nword,
        "tokens": ntok,
        "tokens_per_sentence": round(ntok / max(len(lines), 1), 2),
        "tokens_per_word": round(ntok / max(nword, 1), 3),
        "median_tokens": lens[len(lens) // 2] if lens else 0,
        "p99_tokens": lens[min(len(lens) - 1, int(len(lens) * 0.99))] if lens else 0,
        "max_tokens": lens[-1] if lens else 0,
        "unk_tokens": unk,
        "byte_tokens": byte,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(HERE, "out"))
    ap.add_argument("--out", default=os.path.join(REPO_MODELS, "tokenizers"))
    args = ap.parse_args()
    d = os.path.abspath(args.data)

    need = [os.path.join(d, f) for f in ("lm.train.txt", "mt.train.en", "mt.train.de")]
    for p in need:
        if not os.path.exists(p):
            sys.exit(f"missing {p}: run models/data/build_corpora.sh first")

    out = os.path.abspath(args.out)
    lm, t_lm = train("lm", ["lm.train.txt"], d, out)
    mt, t_mt = train("mt", ["mt.train.en", "mt.train.de"], d, out)

    stats = {"vocab_size": VOCAB_SIZE, "lm": {}, "mt": {}}
    for split in ("train", "valid", "test"):
        stats["lm"][split] = measure(lm, os.path.join(d, f"lm.{split}.txt"))
        for lang in ("en", "de"):
            stats["mt"][f"{split}.{lang}"] = measure(mt, os.path.join(d, f"mt.{split}.{lang}"))
    # no timings in here, so that the file is byte-reproducible
    with open(os.path.join(d, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
        f.write("\n")

    print(f"{'tokenizer':9s} {'file':14s} {'sents':>7s} {'tok/sent':>8s} {'tok/word':>8s} "
          f"{'median':>6s} {'p99':>5s} {'max':>5s} {'unk':>4s} {'bytes':>5s}")
    for name, per in (("lm", stats["lm"]), ("mt", stats["mt"])):
        for k, s in per.items():
            print(f"{name:9s} {k:14s} {s['sentences']:7d} {s['tokens_per_sentence']:8.2f} "
                  f"{s['tokens_per_word']:8.3f} {s['median_tokens']:6d} {s['p99_tokens']:5d} "
                  f"{s['max_tokens']:5d} {s['unk_tokens']:4d} {s['byte_tokens']:5d}")
    print(f"training time: lm {t_lm:.1f}s, mt {t_mt:.1f}s")


if __name__ == "__main__":
    main()
