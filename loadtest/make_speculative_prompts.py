"""Make the two speculative-decoding workloads from loadtest/prompts/brown_test.jsonl.

  /usr/bin/python3 loadtest/make_speculative_prompts.py [--count 32] [--out DIR]

writes DIR/repeat.jsonl (a repetitive workload: a Brown sentence written three times and the
first half of a fourth, so a model that copies its context continues with the rest of it) and
DIR/random.jsonl (a workload where nothing repeats: 48 words drawn at random from the Brown
prompts' vocabulary, seeded, so neither the prompt nor a continuation is likely to match).
DIR defaults to /tmp/abcd-spec-prompts. Deterministic for a given input file.
"""

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--out", default="/tmp/abcd-spec-prompts")
    args = parser.parse_args()
    lines = (ROOT / "loadtest" / "prompts" / "brown_test.jsonl").read_text().splitlines()
    sentences = [json.loads(line)["prompt"] for line in lines]
    sentences = [s for s in sentences if 12 <= len(s.split()) <= 30][: args.count]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "repeat.jsonl", "w") as f:
        for s in sentences:
            words = s.split()
            prompt = " ".join([s] * 3 + words[: len(words) // 2])
            f.write(json.dumps({"prompt": prompt}) + "\n")
    vocabulary = sorted({w for s in sentences for w in s.split()})
    rng = random.Random(27)
    with open(out / "random.jsonl", "w") as f:
        for _ in sentences:
            f.write(json.dumps({"prompt": " ".join(rng.choice(vocabulary) for _ in range(48))}) + "\n")
    print(f"{len(sentences)} prompts each in {out}/repeat.jsonl and {out}/random.jsonl")


if __name__ == "__main__":
    main()
