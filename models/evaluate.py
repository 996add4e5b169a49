"""Evaluate exported model directories: LM perplexity, MT greedy / beam BLEU and chrF, samples.

Usage (from the repository root):
  /usr/bin/python3 models/evaluate.py lm --model DIR [--text models/data/out/lm.test.txt] [--json]
  /usr/bin/python3 models/evaluate.py mt --model DIR [--split test] [--beam 1] [--beam 4] [--out hyp.txt]
  /usr/bin/python3 models/evaluate.py translate --model DIR "Open file" "Save changes?" [--beam 4]
  /usr/bin/python3 models/evaluate.py sample --model DIR --prompt "The jury" [--max-tokens 30]

LM perplexity (exactly what `abcd-cli eval --model DIR --text FILE` computes in the C++ engine):
  1. every line of FILE (without its trailing newline; empty lines included) is encoded with the
     model's tokenizer.model, without bos/eos, and prefixed with bos;
  2. the lines are concatenated in file order into one token stream;
  3. the stream is cut into consecutive non-overlapping chunks of --chunk tokens (default 128;
     the last chunk may be shorter; a last chunk of one token is dropped);
  4. each chunk is scored from an empty state (teacher forcing): every token of the chunk except
     the first is predicted from the chunk's tokens before it;
  5. perplexity = exp(sum of -log p(token) / number of predicted tokens), natural log, computed
     in float64 from the fp32 logits; "per token" = per token of the model's tokenizer (bos included
     as a predicted token where a sentence starts inside a chunk).
Weights are read from the model directory (bf16 -> fp32), so this is the number of the shipped
file. The abc layers use the chunked training form (equal to the recurrent form up to fp32 rounding).

MT: encoder input = source pieces + eos, decoding starts from bos and stops at eos (or at
2 * source length + 10 tokens). Greedy = beam 1. Beam search keeps `beam` hypotheses per
sentence, moves a hypothesis to the finished list when it emits eos, stops when `beam` hypotheses
are finished (or at the length limit) and returns the finished (else alive) hypothesis with the
best log-probability / length^alpha (alpha 1.0, length counted with the eos).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from abcd_ref.abc_attention import ABCAttention  # noqa: E402
from abcd_ref.export import load as load_model_dir  # noqa: E402
from metrics_mt import corpus_bleu, corpus_chrf  # noqa: E402

DATA = ROOT / "data" / "out"


def load(model_dir, abc_chunk=32):
    model = load_model_dir(model_dir)
    model.eval()
    for module in model.modules():
        if isinstance(module, ABCAttention):
            module.chunk = abc_chunk
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(Path(model_dir) / "tokenizer.model"))
    return model, sp


# ------------------------------------------------------------------------------ LM


def lm_chunks(sp, text_path, bos_id, chunk):
    """The token chunks of steps 1-3 of the module docstring."""
    with open(text_path, encoding="utf-8", newline="") as f:  # no newline translation: split on "\n" only
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another one
    stream = []
    for pieces in sp.encode(lines):
        stream.append(bos_id)
        stream.extend(pieces)
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]
    return [c for c in chunks if len(c) >= 2], len(lines)


@torch.no_grad()
def lm_perplexity(model, sp, text_path, chunk=128, batch=16):
    chunks, n_lines = lm_chunks(sp, text_path, model.config.bos_id, chunk)
    nll, count = 0.0, 0
    for length in sorted({len(c) for c in chunks}):
        same = [c for c in chunks if len(c) == length]
        for i in range(0, len(same), batch):
            x = torch.tensor(same[i : i + batch], dtype=torch.long)
            logits = model(x[:, :-1]).double()
            nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
            count += x[:, 1:].numel()
    return {"perplexity": math.exp(nll / count), "nll_sum": nll, "predicted_tokens": count, "chunks": len(chunks),
            "chunk": chunk, "lines": n_lines}


@torch.no_grad()
def sample_greedy(model, sp, prompt, max_tokens=30):
    ids = [model.config.bos_id] + sp.encode(prompt)
    state = model.init_state(1)
    logits = None
    for t in ids:
        logits, state = model.step(torch.tensor([t]), state)
    out = []
    for _ in range(max_tokens):
        nxt = int(logits[0].argmax())
        if nxt == model.config.eos_id:
            break
        out.append(nxt)
        logits, state = model.step(torch.tensor([nxt]), state)
    return sp.decode(out)


# ------------------------------------------------------------------------------ MT


def _reorder(state, index):
    """Select batch rows `index` of a decode state (dicts / lists of tensors, ints kept)."""
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index)
    if isinstance(state, dict):
        return {k: _reorder(v, index) for k, v in state.items()}
    if isinstance(state, list):
        return [_reorder(v, index) for v in state]
    return state


@torch.no_grad()
def translate_batch(model, sources, beam=1, alpha=1.0, max_len=None):
    """sources: list of id lists of ONE length (each ends with eos). Returns list of id lists."""
    cfg = model.config
    n = len(sources)
    src = torch.tensor(sources, dtype=torch.long)
    limit = max_len or (2 * src.shape[1] + 10)
    enc = model.encode(src)
    if beam == 1:
        state = model.init_state(enc)
        tokens = torch.full((n,), cfg.bos_id, dtype=torch.long)
        out = [[] for _ in range(n)]
        done = [False] * n
        for _ in range(limit):
            logits, state = model.step(tokens, state)
            tokens = logits.argmax(-1)
            for i in range(n):
                if not done[i]:
                    if int(tokens[i]) == cfg.eos_id:
                        done[i] = True
                    else:
                        out[i].append(int(tokens[i]))
            if all(done):
                break
        return out
    k = beam
    state = model.init_state(enc.repeat_interleave(k, dim=0))
    tokens = torch.full((n * k,), cfg.bos_id, dtype=torch.long)
    scores = torch.full((n, k), float("-inf"), dtype=torch.float64)
    scores[:, 0] = 0.0
    hyps = [[[] for _ in range(k)] for _ in range(n)]
    finished = [[] for _ in range(n)]  # (normalised score, ids)
    active = [True] * n
    for step in range(limit):
        logits, state = model.step(tokens, state)
        logp = F.log_softmax(logits.double(), dim=-1).view(n, k, -1)
        cand = (scores[:, :, None] + logp).view(n, -1)
        top_scores, top_idx = cand.topk(2 * k, dim=-1)
        vocab = logp.shape[-1]
        new_scores = torch.full((n, k), float("-inf"), dtype=torch.float64)
        new_tokens = torch.full((n, k), cfg.eos_id, dtype=torch.long)
        origin = torch.zeros((n, k), dtype=torch.long)
        new_hyps = [[[] for _ in range(k)] for _ in range(n)]
        for i in range(n):
            if not active[i]:
                continue
            slot = 0
            for s, idx in zip(top_scores[i].tolist(), top_idx[i].tolist()):
                if s == float("-inf"):
                    break
                b, tok = divmod(idx, vocab)
                if tok == cfg.eos_id:
                    if len(finished[i]) < k:
                        finished[i].append((s / (len(hyps[i][b]) + 1) ** alpha, hyps[i][b]))
                    continue
                if slot < k:
                    new_scores[i, slot] = s
                    new_tokens[i, slot] = tok
                    origin[i, slot] = b
                    new_hyps[i][slot] = hyps[i][b] + [tok]
                    slot += 1
            if len(finished[i]) >= k:
                active[i] = False
        if not any(active):
            break
        index = (torch.arange(n)[:, None] * k + origin).view(-1)
        state = _reorder(state, index)
        scores, tokens, hyps = new_scores, new_tokens.view(-1), new_hyps
    out = []
    for i in range(n):
        pool = finished[i] or [(scores[i, b].item() / (len(hyps[i][b]) + 1) ** alpha, hyps[i][b]) for b in range(k)]
        out.append(max(pool, key=lambda x: x[0])[1])
    return out


def translate_all(model, sp, sentences, beam=1, batch=64):
    eos = model.config.eos_id
    encoded = [ids + [eos] for ids in sp.encode(sentences)]
    groups = {}
    for i, ids in enumerate(encoded):
        groups.setdefault(len(ids), []).append(i)
    results = [None] * len(sentences)
    per_batch = max(1, batch // beam)
    for length, idx in sorted(groups.items()):
        for j in range(0, len(idx), per_batch):
            part = idx[j : j + per_batch]
            outs = translate_batch(model, [encoded[i] for i in part], beam=beam)
            for i, ids in zip(part, outs):
                results[i] = sp.decode(ids)
    return results


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# ---------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    lm = sub.add_parser("lm")
    lm.add_argument("--model", required=True)
    lm.add_argument("--text", default=str(DATA / "lm.test.txt"))
    lm.add_argument("--chunk", type=int, default=128)
    lm.add_argument("--json", action="store_true")
    mt = sub.add_parser("mt")
    mt.add_argument("--model", required=True)
    mt.add_argument("--split", default="test")
    mt.add_argument("--beam", type=int, action="append")
    mt.add_argument("--limit", type=int, default=0, help="first N pairs only (0 = all)")
    mt.add_argument("--out", help="write hypotheses to OUT.beamK.txt")
    mt.add_argument("--json", action="store_true")
    tr = sub.add_parser("translate")
    tr.add_argument("--model", required=True)
    tr.add_argument("--beam", type=int, default=1)
    tr.add_argument("text", nargs="+")
    sa = sub.add_parser("sample")
    sa.add_argument("--model", required=True)
    sa.add_argument("--prompt", action="append", required=True)
    sa.add_argument("--max-tokens", type=int, default=30)
    for s in (lm, mt, tr, sa):
        s.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, sp = load(args.model)
    t0 = time.time()
    if args.command == "lm":
        result = lm_perplexity(model, sp, args.text, args.chunk)
        result.update(model=args.model, text=args.text, seconds=round(time.time() - t0, 1))
        print(json.dumps(result) if args.json else f"{args.model}: perplexity {result['perplexity']:.4f} over "
              f"{result['predicted_tokens']} predicted tokens ({result['chunks']} chunks of <= {args.chunk}) of {args.text}")
    elif args.command == "mt":
        src = read_lines(DATA / f"mt.{args.split}.en")
        ref = read_lines(DATA / f"mt.{args.split}.de")
        if args.limit:
            src, ref = src[: args.limit], ref[: args.limit]
        results = []
        for beam in args.beam or [1]:
            t = time.time()
            hyp = translate_all(model, sp, src, beam=beam)
            bleu = corpus_bleu(hyp, ref)
            r = {"model": args.model, "split": args.split, "pairs": len(src), "beam": beam, "bleu": bleu["score"],
                 "bleu_detail": bleu, "chrf": corpus_chrf(hyp, ref), "seconds": round(time.time() - t, 1)}
            results.append(r)
            if args.out:
                Path(f"{args.out}.beam{beam}.txt").write_text("\n".join(hyp) + "\n", encoding="utf-8")
            print(json.dumps(r) if args.json else f"{args.model} {args.split} beam {beam}: BLEU {r['bleu']:.2f} chrF {r['chrf']:.2f} ({r['seconds']}s)", flush=True)
    elif args.command == "translate":
        for text, out in zip(args.text, translate_all(model, sp, args.text, beam=args.beam)):
            print(f"{text}\t{out}")
    else:
        for prompt in args.prompt:
            print(f"{prompt} ||| {sample_greedy(model, sp, prompt, args.max_tokens)}")


if __name__ == "__main__":
    main()
