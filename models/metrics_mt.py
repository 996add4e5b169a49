"""Corpus BLEU and chrF with sacreBLEU's default definitions (one reference per segment).

BLEU (sacreBLEU `BLEU()` defaults: 13a tokenisation, case-sensitive, max n-gram order 4,
smooth_method="exp", no effective order):
  * every hypothesis and reference is tokenised with `tokenize_13a`;
  * for n = 1..4, matches_n = sum over segments of the clipped n-gram matches
    (sum over n-grams g of min(count_hyp(g), count_ref(g))), total_n = sum of max(0, len_hyp - n + 1);
  * precision p_n = 100 * matches_n / total_n; if matches_n == 0 (and total_n > 0) the "exp"
    smoothing uses p_n = 100 / (2^k * total_n) for the k-th such order; if total_n == 0 the
    remaining orders keep p_n = 0 (the score is then 0);
  * brevity penalty BP = 1 if sys_len > ref_len, else exp(1 - ref_len / sys_len) (0 if sys_len = 0);
  * BLEU = BP * exp(mean_n log p_n) (in 0..100; log 0 counts as -inf, giving 0).

chrF (sacreBLEU `CHRF()` defaults: char order 6, word order 0, beta 2, whitespace removed,
no eps smoothing, case-sensitive):
  * whitespace is removed from each segment, then for n = 1..6 the character n-gram counts of
    hypothesis and reference give hyp_n = #hyp n-grams, ref_n = #ref n-grams and
    match_n = sum min(counts), summed over the corpus;
  * over the orders with hyp_n > 0 and ref_n > 0 (the "effective order" m), P = mean match_n / hyp_n,
    R = mean match_n / ref_n;
  * chrF = 100 * (1 + beta^2) P R / (beta^2 P + R) (0 if P + R = 0 or m = 0).
"""

import math
import re
from collections import Counter

_13A_RULES = [
    # punctuation and symbols (ASCII ranges as in mteval-v13a / sacreBLEU's TokenizerRegexp)
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    # period and comma unless preceded by a digit
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    # period and comma unless followed by a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    # dash when preceded by a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(line):
    """sacreBLEU's Tokenizer13a: the mteval-v13a tokenisation of a detokenised segment."""
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = f" {line} "
    for pattern, repl in _13A_RULES:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def _ngrams(tokens, n):
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu_stats(hypotheses, references, max_order=4):
    """(matches[n], totals[n], sys_len, ref_len) summed over the corpus."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    matches, totals = [0] * max_order, [0] * max_order
    sys_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        h, r = tokenize_13a(hyp).split(), tokenize_13a(ref).split()
        sys_len += len(h)
        ref_len += len(r)
        for n in range(1, max_order + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            totals[n - 1] += max(0, len(h) - n + 1)
    return matches, totals, sys_len, ref_len


def bleu_from_stats(matches, totals, sys_len, ref_len):
    """Dict with score, precisions, bp, sys_len, ref_len (sacreBLEU 'exp' smoothing)."""
    order = len(matches)
    precisions = [0.0] * order
    smooth = 1.0
    for n in range(order):
        if totals[n] == 0:
            break
        if matches[n] == 0:
            smooth *= 2
            precisions[n] = 100.0 / (smooth * totals[n])
        else:
            precisions[n] = 100.0 * matches[n] / totals[n]
    if sys_len == 0:
        bp = 0.0
    elif sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len)
    else:
        bp = 1.0
    if bp == 0.0 or min(precisions) == 0.0:
        score = 0.0
    else:
        score = bp * math.exp(sum(math.log(p) for p in precisions) / order)
    return {"score": score, "precisions": precisions, "bp": bp, "sys_len": sys_len, "ref_len": ref_len}


def corpus_bleu(hypotheses, references):
    """Corpus BLEU (0..100) of detokenised hypotheses against one reference each."""
    return bleu_from_stats(*bleu_stats(hypotheses, references))


def chrf_stats(hypotheses, references, char_order=6):
    """[hyp_n, ref_n, match_n] for n = 1..char_order, summed over the corpus."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    stats = [[0, 0, 0] for _ in range(char_order)]
    for hyp, ref in zip(hypotheses, references):
        h, r = "".join(hyp.split()), "".join(ref.split())
        for n in range(1, char_order + 1):
            hc = Counter(h[i : i + n] for i in range(len(h) - n + 1))
            rc = Counter(r[i : i + n] for i in range(len(r) - n + 1))
            stats[n - 1][0] += sum(hc.values())
            stats[n - 1][1] += sum(rc.values())
            stats[n - 1][2] += sum((hc & rc).values())
    return stats


def chrf_from_stats(stats, beta=2.0):
    precision = recall = 0.0
    effective = 0
    for n_hyp, n_ref, n_match in stats:
        if n_hyp > 0 and n_ref > 0:
            precision += n_match / n_hyp
            recall += n_match / n_ref
            effective += 1
    if effective == 0:
        return 0.0
    precision /= effective
    recall /= effective
    if precision + recall == 0:
        return 0.0
    b2 = beta * beta
    return 100.0 * (1 + b2) * precision * recall / (b2 * precision + recall)


def corpus_chrf(hypotheses, references, char_order=6, beta=2.0):
    """Corpus chrF (0..100), sacreBLEU's chrF2 with n = 6."""
    return chrf_from_stats(chrf_stats(hypotheses, references, char_order), beta)
