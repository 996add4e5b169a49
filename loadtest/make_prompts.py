"""Make the committed load-test prompt files from the held-out test splits.

  /usr/bin/python3 loadtest/make_prompts.py [--lm models/data/out/lm.test.txt]
      [--mt models/data/out/mt.test.en] [--count 300]

writes loadtest/prompts/brown_test.jsonl (Brown test split, one sentence of 8 to 60 words per
prompt) and loadtest/prompts/mt_test.jsonl (the EN side of the EN-DE test split, segments of 3
words or more). Lines are taken at evenly spaced positions of the eligible lines, so the choice
is deterministic and covers the whole split (every genre of Brown). Both splits come from
models/data/build_corpora.sh (see models/data/README.md); if only the MT corpus is missing,
build_mt.py alone rebuilds it from the unpacked catalogues:

  /usr/bin/python3 models/data/build_mt.py --packages models/data/debian_packages.txt \
      --mo-root models/data/out/mo --out /tmp/abcd-mt
"""

import argparse
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "loadtest" / "prompts"


def pick(lines, count):
    if len(lines) <= count:
        return list(range(len(lines)))
    return [i * len(lines) // count for i in range(count)]


def write(path, source, eligible, count):
    chosen = pick(eligible, count)
    with open(path, "w", encoding="utf-8") as f:
        for i in chosen:
            number, text = eligible[i]
            f.write(json.dumps({"prompt": text, "source": f"{source.name}:{number}"}, ensure_ascii=False) + "\n")
    digest = hashlib.md5(source.read_bytes()).hexdigest()
    print(f"wrote {path} ({len(chosen)} prompts from {source}, md5 {digest})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default=str(ROOT / "models/data/out/lm.test.txt"))
    parser.add_argument("--mt", default=str(ROOT / "models/data/out/mt.test.en"))
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    lm = Path(args.lm)
    lines = lm.read_text(encoding="utf-8").splitlines()
    eligible = [(n + 1, t.strip()) for n, t in enumerate(lines) if 8 <= len(t.split()) <= 60]
    write(OUT / "brown_test.jsonl", lm, eligible, args.count)

    mt = Path(args.mt)
    lines = mt.read_text(encoding="utf-8").splitlines()
    eligible = [(n + 1, t.strip()) for n, t in enumerate(lines) if len(t.split()) >= 3]
    write(OUT / "mt_test.jsonl", mt, eligible, args.count)


if __name__ == "__main__":
    main()
