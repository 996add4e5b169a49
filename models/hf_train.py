"""Train or finetune a Hugging Face-layout reference model (models/abcd_ref/hf) on the Brown LM corpus.

Usage (from the repository root, Debian's python; one niced thread):
  nice -n 19 /usr/bin/python3 models/hf_train.py --out models/runs/uptrain/llama --max-tokens 3000000
      # pretrain the small softmax Llama of models/README.md ("Uptraining") from scratch
  models/convert.py --from-hf ... --max-tokens N   # finetunes converted models with train_hf below

Data, schedule and optimiser are models/train.py's: Brown windows of seq_len + 1 tokens (bos per
line), shuffled per epoch with the seed; AdamW (0.9, 0.98), linear warmup then cosine to
min_lr_ratio * lr on max(step, token) progress; clipping at 1.0. `train_hf` adds:
  - a teacher (`distill` alpha > 0): loss = (1 - alpha) CE + alpha KL(teacher || student) per
    token, the teacher's logits computed on the same batch without gradient;
  - `trainable`: a predicate on parameter names (others frozen, e.g. attention only);
  - resuming: `resume.pt` in the output directory (fp32 weights, optimiser, step, tokens, history)
    is written every `checkpoint_every` steps and at the end; a run started again with the same
    settings continues from it (other settings: an error naming them); the batches of step s are
    a function of (seed, s), so a resumed run sees the data a straight run sees.
The text is tokenised with a SentencePiece model (tokenizer.model, in Python), or, for a model
directory whose tokenizer is a tokenizer.json alone, by `abcd-cli tokenize --jsonl --json` (the
engine's tokenizer, ids equal to Hugging Face's tokenizers; Debian has no Python `tokenizers`):
abcd_cli_path says which binary.
The output directory gets an HF-layout model (config.json, model.safetensors in `dtype`, tokenizer
files; models/FORMAT.md) and train_log.json. Single-threaded by default (TrainConfig.threads).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import train as trainer  # noqa: E402
from abcd_ref.hf import build_model, preset_config, write_checkpoint  # noqa: E402

TOKENIZER = trainer.TOKENIZERS["lm"]
ABCD_CLI = ROOT.parent / "build" / "server" / "abcd-cli"  # abcd_cli_path's default
RESUME = "resume.pt"
# The small Llama of models/README.md ("Uptraining"): d 256, 4 layers, 4 heads of 64, GQA with
# 2 kv heads, SwiGLU 768 (8/3 d rounded up to 256), RoPE theta 1e4, untied head.
BROWN_LLAMA = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 768,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
}


def brown_llama_config(**overrides):
    return preset_config("llama", "tiny", **{**BROWN_LLAMA, **overrides})


@torch.no_grad()
def init_weights(model, std=0.02, residual_scale=True):
    """HF init (N(0, std) matrices and embeddings, zero biases, unit norms); o_proj / down_proj
    scaled by 1/sqrt(2 layers) as models/train.py does for its residual outputs."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith(".bias"):
            p.zero_()
        else:
            p.normal_(0.0, std)
    if residual_scale:
        n = len(model.model.layers)
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(1 / math.sqrt(2 * n))


class DataError(ValueError):
    """The finetuning text is missing or too short (a one-line message naming the file or flag)."""


def read_documents(paths):
    """The documents of --train-text / --valid-text files, in order: each record's "text" of a JSONL
    file (a name ending in .jsonl, or every non-empty line a JSON object), else each non-empty line."""
    documents = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: not found")
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        jsonl = path.suffix == ".jsonl" or (lines and all(line.lstrip().startswith("{") for line in lines))
        if not jsonl:
            documents.extend(lines)
            continue
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: not a JSON object ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise DataError(f'{path}:{number}: a JSONL record needs a string "text" field')
            documents.append(record["text"])
    return documents


def abcd_cli_path(path=None):
    """The abcd-cli binary that tokenises text with a tokenizer.json: `path` (convert.py's --abcd-cli),
    else $ABCD_CLI, else build/server/abcd-cli of this checkout; DataError when it is not there."""
    cli = Path(path or os.environ.get("ABCD_CLI") or ABCD_CLI)
    if not (cli.is_file() and os.access(cli, os.X_OK)):
        raise DataError(f"{cli}: no abcd-cli there; it tokenises the text with tokenizer.json (build it: cmake --build build "
                        "--target abcd-cli, or give its path with --abcd-cli PATH or $ABCD_CLI)")  # fmt: skip
    return cli


def cli_encode(model_dir, documents, abcd_cli=None):
    """The ids of each document under `model_dir`'s tokenizer as `abcd-cli tokenize --jsonl --json` gives
    them (server/README.md): bos first where that tokenizer adds one (the ids abcd-server prefills for
    the document as a prompt, and Hugging Face's tokenizer gives with add_special_tokens)."""
    cli = abcd_cli_path(abcd_cli)
    records = "".join(json.dumps(document) + "\n" for document in documents).encode()
    command = [str(cli), "tokenize", "--model", str(model_dir), "--text-file", "-", "--jsonl", "--json"]
    run = subprocess.run(command, input=records, capture_output=True, check=False)
    if run.returncode != 0:
        message = run.stderr.decode(errors="replace").strip().splitlines()
        raise DataError(f"{cli} tokenize --model {model_dir}: {message[-1] if message else f'exit status {run.returncode}'}")
    ids = [json.loads(line) for line in run.stdout.splitlines()]
    if len(ids) != len(documents):
        raise DataError(f"{cli} tokenize --model {model_dir}: {len(ids)} lines of ids for {len(documents)} documents")
    return ids


def tokenizer_json_pieces(path):
    """The ids a tokenizer.json can give: one past the largest of model.vocab and added_tokens."""
    try:
        tokenizer = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not readable JSON ({e})") from None
    vocab = tokenizer.get("model", {}).get("vocab") if isinstance(tokenizer, dict) and isinstance(tokenizer.get("model"), dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise DataError(f"{path}: model.vocab: missing or not an object of token ids (a BPE tokenizer.json)")
    ids = list(vocab.values()) + [t.get("id") for t in tokenizer.get("added_tokens") or [] if isinstance(t, dict)]
    if not all(isinstance(i, int) and i >= 0 for i in ids):
        raise DataError(f"{path}: model.vocab and added_tokens ids must be integers >= 0")
    return max(ids) + 1


def encode_documents(tokenizer, documents, bos_id, abcd_cli=None):
    """Per document its ids: with a SentencePiece model file, bos + its pieces (train.py's cut); with a
    model directory (a tokenizer.json alone), cli_encode's (bos where that tokenizer adds one)."""
    if Path(tokenizer).is_dir():
        return cli_encode(tokenizer, documents, abcd_cli)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    return [[bos_id] + pieces for pieces in sp.encode(documents)]


def text_windows(encoded, seq_len):
    """Windows [N, seq_len + 1] of the documents' ids (encode_documents), concatenated (train.py's cut)."""
    return trainer.lm_windows([i for ids in encoded for i in ids], seq_len)


def lm_data(seq_len, bos_id=1, tokenizer=TOKENIZER, train_files=None, valid_files=None, abcd_cli=None):
    """(train windows, valid windows) [N, seq_len + 1] as models/train.py cuts them, tokenised with
    `tokenizer` (encode_documents: a SentencePiece model, or a model directory whose tokenizer.json
    abcd-cli reads): from the bundled Brown corpus, or from `train_files` (read_documents) with
    `valid_files` or, without them, every 20th train window held out."""
    if not train_files:
        if valid_files:
            raise DataError("--valid-text needs --train-text")
        for split in ("lm.train.txt", "lm.valid.txt"):
            if not (trainer.DATA / split).exists():
                raise DataError(f"{trainer.DATA / split} is missing: build the bundled corpus with models/data/build_corpora.sh, "
                                "or give the finetuning text with --train-text FILE")  # fmt: skip
        train_files, valid_files = [trainer.DATA / "lm.train.txt"], [trainer.DATA / "lm.valid.txt"]
    train_w = text_windows(encode_documents(tokenizer, read_documents(train_files), bos_id, abcd_cli), seq_len)
    if valid_files:
        valid_w = text_windows(encode_documents(tokenizer, read_documents(valid_files), bos_id, abcd_cli), seq_len)
    else:
        held_out = torch.arange(len(train_w)) % 20 == 19
        train_w, valid_w = train_w[~held_out], train_w[held_out]
    if len(train_w) < 1 or len(valid_w) < 1:
        raise DataError(f"--train-text: too little text for one train and one validation window of {seq_len + 1} tokens "
                        f"({len(train_w)} and {len(valid_w)}); give more text or a smaller seq_len")  # fmt: skip
    return train_w, valid_w


class Batches:
    """Batch of step s: epoch s // per_epoch, shuffled with seed + epoch (train.py's order)."""

    def __init__(self, windows, batch_size, seed):
        self.windows, self.batch_size, self.seed = windows, batch_size, seed
        self.per_epoch = len(windows) // batch_size
        self._epoch, self._perm = None, None

    def __call__(self, step):
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed + epoch)
            self._epoch, self._perm = epoch, torch.randperm(len(self.windows), generator=g)
        return self.windows[self._perm[i * self.batch_size : (i + 1) * self.batch_size]]


def batch_loss(model, batch, teacher=None, alpha=0.0):
    """(loss to minimise, CE sum, KL sum, target count) of windows [B, T + 1]."""
    logits = model(batch[:, :-1])
    flat = logits.reshape(-1, logits.shape[-1])
    target = batch[:, 1:].reshape(-1)
    ce = F.cross_entropy(flat, target, reduction="sum")
    n = target.numel()
    if teacher is None or alpha == 0.0:
        return ce / n, float(ce), 0.0, n
    with torch.no_grad():
        t_logp = F.log_softmax(teacher(batch[:, :-1]).reshape(-1, flat.shape[-1]), -1)
    kl = F.kl_div(F.log_softmax(flat, -1), t_logp, log_target=True, reduction="sum")
    return ((1 - alpha) * ce + alpha * kl) / n, float(ce), float(kl), n


@torch.no_grad()
def valid_loss(model, windows, batch_size, limit=0):
    model.eval()
    total, count = 0.0, 0
    starts = list(range(0, len(windows), batch_size))
    for s in starts[:limit] if limit else starts:
        _, ce, _, n = batch_loss(model, windows[s : s + batch_size])
        total, count = total + ce, count + n
    model.train()
    return total / max(1, count)


class ResumeError(ValueError):
    """resume.pt was written with other settings."""


def _settings(tc, distill, trainable_names, extra):
    return {"train": asdict(tc), "distill": distill, "trainable": trainable_names, **extra}


def log_line(text):
    print(text, flush=True)


def train_hf(model, config, tc, out_dir, teacher=None, distill=0.0, trainable=None, dtype="bf16", checkpoint_every=100, extra=None,
             tokenizer=TOKENIZER, log=log_line, train_files=None, valid_files=None, tokenizer_dir=None, abcd_cli=None):  # fmt: skip
    """Train `model` (an HF reference model of HF config dict `config`) with TrainConfig `tc`; write
    the HF directory to out_dir. Resumes from out_dir/resume.pt (same settings). Returns the summary.
    The text (lm_data) is tokenised with the SentencePiece model `tokenizer`, or, where `tokenizer` is
    a model directory with a tokenizer.json alone, by abcd-cli (`abcd_cli`: abcd_cli_path). Without
    `tokenizer_dir` the SentencePiece model is copied to out_dir with the special ids it defines;
    with it the tokenizer files of that directory (convert_hf.TOKENIZER_FILES, tokenizer.json) are
    copied as they are and the config's vocab_size and special ids are kept."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    names = [n for n, _ in model.named_parameters()]
    train_names = [n for n in names if trainable is None or trainable(n)]
    for name, p in model.named_parameters():
        p.requires_grad_(name in train_names)
    params = dict(model.named_parameters())
    decay = [params[n] for n in train_names if params[n].dim() >= 2]
    no_decay = [params[n] for n in train_names if params[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=tc.lr, betas=(0.9, 0.98), eps=1e-8)  # fmt: skip
    if teacher is not None:
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    settings = _settings(tc, distill, None if trainable is None else train_names, extra or {})
    step, tokens, history, train_s = 0, 0, {"train": [], "valid": []}, 0.0
    resume_path = out_dir / RESUME
    if resume_path.exists():
        saved = torch.load(resume_path)
        if saved["settings"] != settings:
            diff = sorted(k for k in set(saved["settings"]) | set(settings) if saved["settings"].get(k) != settings.get(k))
            raise ResumeError(f"{resume_path}: saved with other settings ({', '.join(diff)}); use another --out or delete it")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        step, tokens, history, train_s = saved["step"], saved["tokens"], saved["history"], saved["train_s"]
        log(f"resumed from {resume_path}: step {step}, {tokens} tokens")
    train_w, valid_w = lm_data(tc.seq_len, config.get("bos_token_id") or 1, tokenizer, train_files, valid_files, abcd_cli)
    batches = Batches(train_w, tc.batch_size, tc.seed)
    log(f"{sum(p.numel() for p in model.parameters()):,} parameters ({sum(p.numel() for p in params.values() if p.requires_grad):,} trained); "
        f"{len(train_w)} train windows of {tc.seq_len + 1}; threads {torch.get_num_threads()}")  # fmt: skip

    def save_resume():
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "tokens": tokens}
        torch.save({**state, "history": history, "train_s": train_s, "settings": settings}, str(resume_path) + ".tmp")
        Path(str(resume_path) + ".tmp").replace(resume_path)

    model.train()
    run = [0.0, 0.0, 0]
    t0 = time.time() - train_s
    while step < tc.steps and not (tc.max_tokens and tokens >= tc.max_tokens):
        progress = tokens / tc.max_tokens if tc.max_tokens else 0.0
        for group in opt.param_groups:
            group["lr"] = trainer.lr_at(step, tc, progress)
        loss, ce, kl, n = batch_loss(model, batch=batches(step), teacher=teacher, alpha=distill)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([params[n_] for n_ in train_names], tc.clip)
        opt.step()
        step, tokens = step + 1, tokens + n
        run = [run[0] + ce, run[1] + kl, run[2] + n]
        train_s = time.time() - t0
        if step % 25 == 0 or step == 1:
            log(f"step {step} ce {run[0] / run[2]:.4f} kl {run[1] / run[2]:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"tokens {tokens} {train_s:.0f}s ({train_s / step:.2f}s/step)")  # fmt: skip
            history["train"].append({"step": step, "ce": run[0] / run[2], "kl": run[1] / run[2], "tokens": tokens, "elapsed_s": train_s})
            run = [0.0, 0.0, 0]
        if tc.eval_every and step % tc.eval_every == 0:
            v = valid_loss(model, valid_w, tc.batch_size, tc.eval_batches)
            log(f"step {step} valid loss (first {tc.eval_batches} batches) {v:.4f} ppl {math.exp(v):.2f}")
            history["valid"].append({"step": step, "loss": v, "batches": tc.eval_batches})
        if checkpoint_every and step % checkpoint_every == 0:
            save_resume()
    save_resume()
    v = valid_loss(model, valid_w, tc.batch_size, tc.final_eval_batches)
    log(f"final valid loss {v:.4f} ppl {math.exp(v):.2f}; {step} steps, {tokens} tokens, {train_s:.0f}s")
    history["valid"].append({"step": step, "loss": v, "batches": tc.final_eval_batches})
    write_checkpoint(out_dir, config, dtype=dtype, tokenizer=None if tokenizer_dir else tokenizer, tensors=model.state_dict())
    if tokenizer_dir:
        for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (Path(tokenizer_dir) / name).exists():
                shutil.copyfile(Path(tokenizer_dir) / name, out_dir / name)
    summary = {**settings, "steps_done": step, "tokens": tokens, "train_seconds": round(train_s, 1), "final_valid_loss": v,
               "final_valid_ppl": math.exp(v), "dtype": dtype, "torch": torch.__version__, "history": history}  # fmt: skip
    (out_dir / "train_log.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"wrote {out_dir}")
    return summary


def train_config(args):
    tc = trainer.TrainConfig(task="lm", steps=10**9, max_tokens=args.max_tokens, batch_size=args.batch_size, seq_len=args.seq_len,
                             lr=args.lr, warmup=args.warmup, seed=args.seed, threads=args.threads, eval_every=args.eval_every,
                             eval_batches=10, final_eval_batches=0)  # fmt: skip
    return tc


def add_train_args(p, max_tokens, lr, warmup):
    p.add_argument("--max-tokens", type=int, default=max_tokens, help="token budget (the LR schedule runs on it)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--dtype", default="bf16", choices=["f32", "bf16", "f16"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    add_train_args(p, max_tokens=3_000_000, lr=1e-3, warmup=100)
    args = p.parse_args(argv)
    config = brown_llama_config()
    config["vocab_size"] = trainer.tokenizer("lm").get_piece_size()
    torch.manual_seed(args.seed)
    model = build_model(config)
    init_weights(model)
    train_hf(model, config, train_config(args), args.out, dtype=args.dtype, checkpoint_every=args.checkpoint_every)


if __name__ == "__main__":
    main()
