"""The uptraining table of models/README.md ("Uptraining a Llama"; issue 29): one small softmax Llama
trained on Brown, converted to gsa / t2r / abc / a t2r hybrid, perplexity before and after finetuning
at two token budgets, one row's seed spread, greedy samples.

Usage (from the repository root; every run niced, one torch thread each):
  nice -n 19 /usr/bin/python3 models/uptrain.py [--jobs 2] [--dry-run]
  /usr/bin/python3 models/uptrain.py --eval DIR        # test perplexity + greedy samples of one directory
  ... --only t2r-distill-131072,...   # only these runs, started in that order (after the original); names: --dry-run
  ... --small                         # a 245,760-token original, one 32,768-token budget (runs/uptrain-small)
The attention-only and distillation (alpha 0.5) variants run for t2r and gsa at the largest budget.

Outputs under models/runs/uptrain/ (git-ignored): llama/ (the softmax original, hf_train.py), one
directory per conversion and budget (convert.py --from-hf), each with eval.json (test perplexity
from the reference, exactly evaluate.py lm's definition: lines with bos, chunks of 128 from an empty
state), and table.md / results.json. A run whose output exists is not redone (and a finetune
resumes from its resume.pt), so an interrupted run picks up where it stopped.
"""

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "runs" / "uptrain"
PY = sys.executable
LLAMA_TOKENS = 1_228_800  # 600 steps of 16 x 128 (0.9 epoch), the quality table's LM budget
LLAMA_WARMUP = 60
BUDGETS = (32_768, 131_072)  # finetunes: 2.7% and 10.7% of the pretraining tokens
FINETUNE = ["--lr", "1e-3", "--warmup", "4"]
PROMPTS = ("The jury said", "In the morning", "He")
# name -> convert.py arguments (the hybrid keeps layer 0 softmax)
CONVERSIONS = {
    "gsa": ["--to", "gsa", "--num-slots", "64"],
    "t2r": ["--to", "t2r", "--features", "32"],
    "abc": ["--to", "abc", "--slots", "32"],
    "t2r-hybrid": ["--to", "t2r", "--features", "32", "--layers", "1,2,3"],
}
SEED_ROW = ("t2r", BUDGETS[0], 1235)
# --small: a fifth of the original's pretraining (120 steps) and one 32,768-token finetune budget, in
# runs/uptrain-small (what a loaded 2-core machine runs in well under an hour)
SMALL = {"RUNS": ROOT / "runs" / "uptrain-small", "LLAMA_TOKENS": 245_760, "LLAMA_WARMUP": 12, "BUDGETS": (32_768,)}
# the finetune variants of one conversion at the largest budget: T2R's attention-only recipe, and
# distillation from the softmax original ((1 - 0.5) CE + 0.5 KL(original || model) per token)
VARIANTS = {"attn-only": ["--attention-only"], "distill": ["--distill", "0.5"]}
VARIANT_ROWS = ("t2r", "gsa")


def runs():
    """[(name, command or None, output dir, needs)] in the order they are started."""
    llama = RUNS / "llama"
    out = [("llama", [PY, str(ROOT / "hf_train.py"), "--out", str(llama), "--max-tokens", str(LLAMA_TOKENS), "--lr", "1.5e-3",
                      "--warmup", str(LLAMA_WARMUP), "--checkpoint-every", "50"], llama, [])]  # fmt: skip
    convert = [PY, str(ROOT / "convert.py"), "--from-hf", str(llama)]
    for name, args in CONVERSIONS.items():
        out.append((f"{name}-0", convert + args + ["--out", str(RUNS / f"{name}-0")], RUNS / f"{name}-0", ["llama"]))
    for budget in BUDGETS:
        for name, args in CONVERSIONS.items():
            run = f"{name}-{budget}"
            out.append((run, convert + args + FINETUNE + ["--max-tokens", str(budget), "--out", str(RUNS / run)], RUNS / run, ["llama"]))
    name, budget, seed = SEED_ROW
    run = f"{name}-{budget}-seed{seed}"
    args = CONVERSIONS[name] + FINETUNE + ["--max-tokens", str(budget), "--seed", str(seed), "--out", str(RUNS / run)]
    out.append((run, convert + args, RUNS / run, ["llama"]))
    for name in VARIANT_ROWS:
        for variant, extra in VARIANTS.items():
            run = f"{name}-{variant}-{BUDGETS[-1]}"
            args = CONVERSIONS[name] + FINETUNE + extra + ["--max-tokens", str(BUDGETS[-1]), "--out", str(RUNS / run)]
            out.append((run, convert + args, RUNS / run, ["llama"]))
    return out


@torch.no_grad()
def evaluate(model_dir, chunk=128):
    """Test perplexity (evaluate.py lm's chunks) and greedy samples of an HF directory; writes eval.json."""
    import sentencepiece as spm

    from abcd_ref.hf import load_checkpoint, state_bytes
    from abcd_ref.hf.config import kv_bytes_per_token
    from convert_hf import set_training_chunks
    from evaluate import DATA, lm_chunks

    torch.set_num_threads(1)
    model_dir = Path(model_dir)
    model, config = load_checkpoint(model_dir)
    model.eval()
    set_training_chunks(model)
    sp = spm.SentencePieceProcessor(model_file=str(model_dir / "tokenizer.model"))
    t0 = time.time()
    chunks, _ = lm_chunks(sp, DATA / "lm.test.txt", config["bos_token_id"], chunk)
    nll, count = 0.0, 0
    for length in sorted({len(c) for c in chunks}):
        same = [c for c in chunks if len(c) == length]
        for i in range(0, len(same), 16):
            x = torch.tensor(same[i : i + 16], dtype=torch.long)
            logits = model(x[:, :-1]).double()
            nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
            count += x[:, 1:].numel()
    samples = {}
    for prompt in PROMPTS:
        ids = [config["bos_token_id"]] + sp.encode(prompt)
        state, logits, out = model.init_state(1), None, []
        for t in ids:
            logits, state = model.step(torch.tensor([t]), state)
        for _ in range(20):
            nxt = int(logits[0].argmax())
            if nxt == config["eos_token_id"]:
                break
            out.append(nxt)
            logits, state = model.step(torch.tensor([nxt]), state)
        samples[prompt] = sp.decode(out)
    fixed = 0 if config["model_type"] == "llama" else state_bytes(config)
    result = {"perplexity": math.exp(nll / count), "predicted_tokens": count, "chunk": chunk, "seconds": round(time.time() - t0, 1),
              "state_bytes_fixed_fp32": fixed, "kv_bytes_per_token_fp32": kv_bytes_per_token(config), "samples": samples}  # fmt: skip
    log = model_dir / "train_log.json"
    if log.exists():
        train = json.loads(log.read_text())
        result.update(tokens=train["tokens"], train_seconds=train["train_seconds"])
    (model_dir / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def run_one(name, command, out_dir):
    if command is not None and not (out_dir / "model.safetensors").exists():
        with open(RUNS / f"{name}.log", "a") as log:
            subprocess.run(["nice", "-n", "19"] + command, stdout=log, stderr=subprocess.STDOUT, check=True)
    if not (out_dir / "eval.json").exists():
        subprocess.run(["nice", "-n", "19", PY, __file__, "--eval", str(out_dir)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((out_dir / "eval.json").read_text())


def table(results):
    """Markdown rows: model, budget, test ppl, ratio to the original, state bytes, samples."""
    base = results["llama"]["perplexity"]
    lines = ["| model | finetune tokens | test ppl | vs softmax original | fixed state (fp32) | KV per token (fp32) |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        tokens = "pretrained " + f"{r.get('tokens', 0):,}" if name == "llama" else f"{r.get('tokens', 0):,}"
        lines.append(f"| {name} | {tokens} | {r['perplexity']:.1f} | {r['perplexity'] / base:.2f}x | {r['state_bytes_fixed_fp32']:,} | {r['kv_bytes_per_token_fp32']:,} |")
    lines += ["", "Greedy samples (20 tokens):", "", "```"]
    for prompt in PROMPTS:
        for name, r in results.items():
            lines.append(f"{name:22s} {prompt} | {r['samples'][prompt]}")
    return "\n".join(lines + ["```", ""])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--eval", help="evaluate one HF directory and exit")
    p.add_argument("--small", action="store_true", help="the small budget (SMALL) in runs/uptrain-small")
    p.add_argument("--only", help="comma list of run names (default: all; llama is always run first)")
    args = p.parse_args(argv)
    if args.eval:
        print(json.dumps(evaluate(args.eval), indent=2))
        return
    if args.small:
        globals().update(SMALL)
    RUNS.mkdir(parents=True, exist_ok=True)
    todo = runs()
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {name for name, _, _, _ in todo}
        if unknown:
            sys.exit(f"--only: unknown run names {sorted(unknown)} (see --dry-run)")
        todo = [todo[0]] + sorted((t for t in todo[1:] if t[0] in names), key=lambda t: names.index(t[0]))  # started in the order given
    if args.dry_run:
        for name, command, _, _ in todo:
            print(name, " ".join(command or []))
        return
    results = {"llama": run_one(*todo[0][:3])}  # every conversion needs it
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {name: pool.submit(run_one, name, command, out) for name, command, out, _ in todo[1:]}
        for name, future in futures.items():
            results[name] = future.result()
            print(f"{name}: test ppl {results[name]['perplexity']:.2f}", flush=True)
    (RUNS / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (RUNS / "table.md").write_text(table(results))
    print(table(results))


if __name__ == "__main__":
    main()
