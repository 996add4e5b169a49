#!/usr/bin/env python3
"""Build English->German sentence pairs from Debian gettext catalogues.

Input: --mo-root holds one directory per Debian package (already unpacked with
dpkg-deb by build_corpora.sh), each with usr/share/locale/de/LC_MESSAGES/*.mo.
Packages are read in the order of --packages (models/data/debian_packages.txt),
.mo files in name order, entries in .mo order (sorted by msgid), so "first
occurrence" is deterministic.

Output (in --out): mt.{train,valid,test}.{en,de} (line-aligned, one segment per
line) and mt_stats.json with the pair count after every stage. Only the
standard library is used; output is byte-deterministic for the same .debs.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import struct
import sys

MAX_CHARS = 200
MAX_RATIO = 3.0
RATIO_SMOOTH = 5  # ratio = (len_long + 5) / (len_short + 5); keeps "Up"/"Nach oben"
# split by hash of a normalised English key, in units of 1/10000
VALID_BELOW = 110
TEST_BELOW = 220


# ---------------------------------------------------------------- .mo reader
def read_mo(path):
    """Return (charset, [(msgid_bytes, msgstr_bytes), ...]) from a GNU .mo file.

    Only the static string tables are read; system-dependent strings
    (revision 1 .mo, e.g. <PRIu64>) are ignored.
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        raise ValueError(f"{path}: too short for a .mo file")
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x950412DE:
        end = "<"
    elif magic == 0xDE120495:
        end = ">"
    else:
        raise ValueError(f"{path}: bad .mo magic {magic:#x}")
    _rev, n, orig_off, trans_off = struct.unpack(end + "4I", data[4:20])
    entries = []
    for i in range(n):
        ol, oo = struct.unpack(end + "2I", data[orig_off + 8 * i: orig_off + 8 * i + 8])
        tl, to = struct.unpack(end + "2I", data[trans_off + 8 * i: trans_off + 8 * i + 8])
        entries.append((data[oo: oo + ol], data[to: to + tl]))
    charset = "utf-8"
    for mid, mstr in entries:
        if mid == b"":
            m = re.search(rb"charset=([A-Za-z0-9_.:-]+)", mstr)
            if m and m.group(1).lower() not in (b"charset",):
                charset = m.group(1).decode("ascii")
            break
    return charset, entries


# ---------------------------------------------------------------- cleaning
MARKUP_RE = re.compile(
    r"</?(?:b|i|u|s|tt|big|small|span|sub|sup|a|em|strong|code|br|p)\b[^<>]*>",
    re.IGNORECASE)
ENTITY_RE = re.compile(r"&(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);")
ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'"}
WS_RE = re.compile(r"\s+")
CTRL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # left after WS_RE: ^B (hexchat bold), ^G
# printf (incl. gcc's %qs %<...%> %wd), positional %1$s, python %(name)s,
# {0} {name}, ${VAR} $VAR, @VAR@
FORMAT_RE = re.compile(
    r"%(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjztwIZ])?[a-zA-Z%<>]"
    r"|%\([A-Za-z_0-9]+\)[a-zA-Z]"
    r"|\{[A-Za-z_0-9]*\}"
    r"|\$\{?[A-Za-z_][A-Za-z_0-9]*\}?"
    r"|@[A-Za-z_][A-Za-z_0-9]*@")


LEAD_PUNCT = "\"'([{<«»„“‚‘›‹"
WORD_RE = re.compile(r"[\w&]+")
PIPE_CTX_RE = re.compile(r"^([A-Za-z]*[a-z][A-Za-z]*)\|([^|]+)$")
PIPE_CTX2_RE = re.compile(r"^\|[A-Za-z0-9_.-]+\|")  # gnupg: |pinentry-label|_Yes
# e2fsprogs' compressed messages: "@i %i has @n mode" (expanded at run time)
E2FS_ABBREV_RE = re.compile(r"(?<![\w@^])@[a-zA-Z](?![\w{])")
META_MSGIDS = {"translator-credits", "translator_credits", "translator credits",
               "your names", "your emails", "translated by"}


def _at_token_start(s, i):
    """True if position i starts a whitespace token (leading quotes and
    brackets aside): `_File`, `Save _As`, `(_Help)`."""
    a = i
    while a > 0 and not s[a - 1].isspace():
        a -= 1
    return all(c in LEAD_PUNCT for c in s[a:i])


def _word_start(s, i):
    return _at_token_start(s, i) or (i > 0 and s[i - 1] in "-/|")


def _run_at(s, i, mark):
    """The identifier-like run (letters, digits, '_', and the mark) around i."""
    a = i
    while a > 0 and (s[a - 1].isalnum() or s[a - 1] in ("_", mark)):
        a -= 1
    b = i + 1
    while b < len(s) and (s[b].isalnum() or s[b] in ("_", mark)):
        b += 1
    return s[a:b]


def strip_mnemonic(s, other, mark, vocab):
    """Remove GTK '_' / Qt-style '&' mnemonic markers from s.

    Normally a marker is the only `mark` in the string (HTML entities aside),
    followed by a letter/digit. At the start of a word (`_File`, `Save _As`,
    `Soft-_Proofing`, `/Help/_About`) it is always taken as a marker. Inside
    a word (`Pr_eferences`) the decision uses `vocab`, the words seen in all
    catalogues: if removing the mark gives a known word (Preferences, PDF,
    Status) it is a marker, unless the word is also copied verbatim into the
    other language, both halves are words and it is all lower/upper case
    (file_name). If it gives no known word, it is an identifier (i_frag,
    Kuala_Lumpur, AT&T) when copied verbatim into the other language or made
    of two words in one case (io_channels, SOURCE_DIRECTORY), else a marker
    (Mitarbeiterüber_sicht, Auto_scroll). Several marks are stripped only
    when all are at word starts (`Show '_Open _Folder'`).
    """
    if mark == "&" and "&&" in ENTITY_RE.sub("", s):
        return s
    pos = [m.start() for m in re.finditer(re.escape(mark), s)
           if not (mark == "&" and ENTITY_RE.match(s, m.start()))]
    if not pos:
        return s
    for i in pos:
        nxt = s[i + 1] if i + 1 < len(s) else " "
        if not (nxt.isalnum() or (mark == "_" and nxt == "&")):
            return s
    if len(pos) > 1:
        # several marks: only "Show '_Open _Folder'" style, all at word starts
        if all(_word_start(s, i) for i in pos):
            for i in reversed(pos):
                s = s[:i] + s[i + 1:]
        return s
    i = pos[0]
    if not _word_start(s, i):
        if not s[i - 1].isalnum():
            return s  # %<_Noreturn%>, (&x): after punctuation, not a word start
        if mark == "&":
            a = i
            while a > 0 and not s[a - 1].isspace():
                a -= 1
            tok = s[a:].split(None, 1)[0]
            if "=" in tok or "?" in tok or "/" in tok:  # URL query, path
                return s
        run = _run_at(s, i, mark)
        bare = run.replace(mark, "")
        word = bare.casefold() in vocab
        if s[i + 1].isupper():
            # Hong_Kong, KP_End, Scroll_Lock, LC_ALL: names, not mnemonics;
            # but P_DF -> PDF is a known word
            if not (bare.isupper() and word):
                return s
        in_other = re.search(r"(?<![^\W_])" + re.escape(run) + r"(?![\w&])", other,
                             re.IGNORECASE) is not None
        halves = all(len(h) >= 2 and h.casefold() in vocab for h in run.split(mark))
        # identifiers are all lower or all upper case: file_name, LC_ALL
        ident_case = bare.islower() or bare.isupper()
        if word:
            if in_other and halves and ident_case:
                return s  # file_name copied into the translation
        elif in_other or (halves and ident_case):
            return s  # i_frag, Kuala_Lumpur, io_channels, SOURCE_DIRECTORY
    return s[:i] + s[i + 1:]


def strip_pipe_context(en, de):
    """glib Q_()/mc style `Context|String` msgids: drop the context word;
    gnupg's `|pinentry-label|String` likewise."""
    m = PIPE_CTX2_RE.match(en)
    if m:
        prefix = m.group(0)
        return en[len(prefix):], de[len(prefix):] if de.startswith(prefix) else de
    m = PIPE_CTX_RE.match(en)
    if not m:
        return en, de
    prefix = m.group(1) + "|"
    if de.startswith(prefix):
        return m.group(2), de[len(prefix):]
    if "|" not in de:
        return m.group(2), de
    return en, de


def build_vocab(strings):
    """Casefolded words seen anywhere in the catalogues; runs that contain
    '_' or '&' (mnemonics, identifiers) are left out."""
    vocab = set()
    for s in strings:
        vocab.update(w.casefold() for w in WORD_RE.findall(s)
                     if "_" not in w and "&" not in w)
    return vocab


def unescape(s):
    return ENTITY_RE.sub(lambda m: _entity(m.group(0)), s)


def _entity(e):
    if e in ENTITIES:
        return ENTITIES[e]
    try:
        if e.startswith("&#x"):
            return chr(int(e[3:-1], 16))
        return chr(int(e[2:-1]))
    except (ValueError, OverflowError):
        return e


def clean_pair(en, de, vocab):
    en, de = strip_pipe_context(en, de)
    en = MARKUP_RE.sub("", en)
    de = MARKUP_RE.sub("", de)
    en2 = strip_mnemonic(en, de, "_", vocab)
    de2 = strip_mnemonic(de, en, "_", vocab)
    en, de = en2, de2
    en2 = strip_mnemonic(en, de, "&", vocab)
    de2 = strip_mnemonic(de, en, "&", vocab)
    en, de = unescape(en2), unescape(de2)
    en = WS_RE.sub(" ", CTRL_RE.sub(lambda m: " " if m.group(0).isspace() else "", en)).strip()
    de = WS_RE.sub(" ", CTRL_RE.sub(lambda m: " " if m.group(0).isspace() else "", de)).strip()
    return en, de


def letters_left(s):
    """Number of letters once format specifiers are removed."""
    return sum(1 for c in FORMAT_RE.sub(" ", s) if c.isalpha())


def split_key(en):
    """Normalised English key for the split: 'Open...', '_Open', 'open:' land
    in the same split, so near-duplicates do not leak across splits."""
    k = "".join(c for c in en.casefold() if c.isalnum() or c.isspace())
    k = WS_RE.sub(" ", k).strip()
    return int.from_bytes(hashlib.sha256(k.encode("utf-8")).digest()[:8], "big") % 10000


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", required=True)
    ap.add_argument("--mo-root", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    packages = []
    with open(args.packages, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                packages.append(line)

    stages = [
        "raw_entries", "no_header", "no_plural", "nonempty_msgstr", "decoded",
        "not_meta", "nonempty_after_clean", "no_abbrev_codes", "not_format_only", "max_200_chars",
        "length_ratio_ok", "not_untranslated", "dedup_english",
    ]
    count = {s: 0 for s in stages}
    per_package = {}
    context_stripped = 0
    mnemonics = {"_": 0, "&": 0}
    pairs = []        # (en, de) in deterministic corpus order
    seen = set()

    # pass 1: read and decode every catalogue entry, in corpus order
    decoded = []      # (pkg, en, de)
    for pkg in packages:
        mos = sorted(glob.glob(os.path.join(
            args.mo_root, pkg, "usr/share/locale/de/LC_MESSAGES/*.mo")))
        if not mos:
            sys.exit(f"package {pkg}: no German .mo file found")
        per_package[pkg] = {"mo_files": [os.path.basename(m) for m in mos],
                            "raw_entries": 0, "kept_pairs": 0}
        for mo in mos:
            charset, entries = read_mo(mo)
            for mid, mstr in entries:
                count["raw_entries"] += 1
                per_package[pkg]["raw_entries"] += 1
                if mid == b"":
                    continue
                count["no_header"] += 1
                if b"\x00" in mid or b"\x00" in mstr:
                    continue
                count["no_plural"] += 1
                if not mstr.strip():
                    continue
                count["nonempty_msgstr"] += 1
                if b"\x04" in mid:  # msgctxt \x04 msgid
                    mid = mid.split(b"\x04", 1)[1]
                    context_stripped += 1
                try:
                    en = mid.decode(charset)
                    de = mstr.decode(charset)
                except (UnicodeDecodeError, LookupError):
                    continue
                count["decoded"] += 1
                decoded.append((pkg, en, de))

    # pass 2: clean, filter, dedupe
    vocab = build_vocab(x for _, en, de in decoded for x in (en, de))
    for pkg, en0, de0 in decoded:
        if en0.strip().casefold() in META_MSGIDS:
            continue
        count["not_meta"] += 1
        en, de = clean_pair(en0, de0, vocab)
        if en0.count("_") > en.count("_"):
            mnemonics["_"] += 1
        if ENTITY_RE.sub("", en0).count("&") > en.count("&"):
            mnemonics["&"] += 1
        if not en or not de:
            continue
        count["nonempty_after_clean"] += 1
        if any(c not in de for c in E2FS_ABBREV_RE.findall(en)):
            continue
        count["no_abbrev_codes"] += 1
        if letters_left(en) < 2 or letters_left(de) < 2:
            continue
        count["not_format_only"] += 1
        if len(en) > MAX_CHARS or len(de) > MAX_CHARS:
            continue
        count["max_200_chars"] += 1
        lo, hi = sorted((len(en), len(de)))
        if (hi + RATIO_SMOOTH) / (lo + RATIO_SMOOTH) > MAX_RATIO:
            continue
        count["length_ratio_ok"] += 1
        # a segment of 3+ words copied unchanged into the German side
        # ("Interner Fehler: <English>" included) is untranslated
        if len(en.split()) >= 3 and en in de:
            continue
        count["not_untranslated"] += 1
        if en in seen:
            continue
        seen.add(en)
        count["dedup_english"] += 1
        pairs.append((en, de))
        per_package[pkg]["kept_pairs"] += 1

    splits = {"train": [], "valid": [], "test": []}
    for en, de in pairs:
        h = split_key(en)
        name = "valid" if h < VALID_BELOW else "test" if h < TEST_BELOW else "train"
        splits[name].append((en, de))

    split_stats = {}
    for name, ps in splits.items():
        # deterministic shuffle: order by hash of the English string
        ps.sort(key=lambda p: hashlib.sha256(p[0].encode("utf-8")).digest())
        for lang, idx in (("en", 0), ("de", 1)):
            path = os.path.join(args.out, f"mt.{name}.{lang}")
            with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
                for p in ps:
                    f.write(p[idx] + "\n")
            os.replace(path + ".tmp", path)
        split_stats[name] = {
            "pairs": len(ps),
            "en_words": sum(len(p[0].split()) for p in ps),
            "de_words": sum(len(p[1].split()) for p in ps),
            "en_chars": sum(len(p[0]) for p in ps),
            "de_chars": sum(len(p[1]) for p in ps),
        }

    prev = None
    for s in stages:
        drop = "" if prev is None else f"  (-{count[prev] - count[s]})"
        print(f"mt stage {s:22s} {count[s]:7d}{drop}")
        prev = s
    print(f"mt context prefixes stripped: {context_stripped}; "
          f"mnemonics stripped (en side): _ {mnemonics['_']}, & {mnemonics['&']}")
    for name, st in split_stats.items():
        print(f"mt {name:5s}: {st['pairs']:6d} pairs, {st['en_words']:7d} en words, "
              f"{st['de_words']:7d} de words")

    stats = {
        "stages": count,
        "stage_order": stages,
        "context_prefixes_stripped": context_stripped,
        "mnemonics_stripped_en": mnemonics,
        "splits": split_stats,
        "per_package": per_package,
        "params": {"max_chars": MAX_CHARS, "max_ratio": MAX_RATIO,
                   "ratio_smooth": RATIO_SMOOTH,
                   "valid_per_10000": VALID_BELOW,
                   "test_per_10000": TEST_BELOW - VALID_BELOW},
    }
    with open(os.path.join(args.out, "mt_stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
