"""llama.cpp as a second check of the Hugging Face types qwen2 / qwen3 / mistral: random checkpoints in
the exact HF layout (models/write_hf_checkpoint.py, fp32, the repository's SentencePiece tokenizer),
converted by llama.cpp's own convert_hf_to_gguf.py to f32 GGUF and served by its llama-server (f32 KV
cache, flash attention off: its CPU flash attention rounds to f16, 5e-4 to 3e-3 in log-probs here;
abcd-cli with --kv-cache-format f32 too); greedy ids over --steps tokens compared with the float64
reference (models/abcd_ref) and with abcd-cli.

Usage (from the repository root, after loadtest/peer/build_llama_cpp.sh):
  nice -n 19 /usr/bin/python3 loadtest/llama_cpp_hf_check.py [--llama-cpp /tmp/abcd-peer/llama.cpp]
      [--work /tmp/abcd-llama-cpp-check] [--steps 64] [--json OUT.json]

Debian's Python has no transformers, mistral_common or safetensors and its torch (1.13) no float8
dtypes; the conversion runs through loadtest/peer/convert.py, whose stand-ins (loadtest/peer/shim/)
cover the parts the converter touches on these checkpoints (AutoConfig fails, so the converter reads
config.json itself; safe_open reads F32/F16/BF16 tensors; the mistral_common names are only
imported). python3-tqdm and python3-yaml are needed (apt).
Exit status 1 if a model's llama.cpp ids differ from the reference where they are expected equal.
"""

import argparse
import json
import math
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
PY = "/usr/bin/python3"
PROMPT = "The jury said"
SIZES = ["--preset", "tiny", "--set", "hidden_size=128", "--set", "intermediate_size=256", "--set", "head_dim=32", "--num-kv-heads", "2"]
# name -> (model type, extra writer args, expected equal to the reference)
MODELS = {
    "qwen2": ("qwen2", ["--set", "rope_theta=1000000.0"], True),
    "qwen3": ("qwen3", ["--set", "rope_theta=1000000.0", "--tied"], True),
    "mistral": ("mistral", [], True),  # sliding_window 4096: longer than the check, so no window applies
    # a window of 8 tokens: llama.cpp's converter maps MistralForCausalLM to its llama architecture and
    # writes no sliding window, so past 8 tokens it attends to everything; recorded, not required
    "mistral_w8": ("mistral", ["--set", "sliding_window=8"], False),
}


def reference_greedy(model_dir, prompt_ids, steps):
    """(ids, log-probs of the chosen ids) from the float64 reference's recurrent step."""
    from abcd_ref.hf import load_checkpoint

    model, _ = load_checkpoint(model_dir)
    model = model.double().eval()
    ids, logprobs = [], []
    with torch.no_grad():
        state = model.init_state(1)
        for t in prompt_ids:
            logits, state = model.step(torch.tensor([t]), state)
        for _ in range(steps):
            lp = torch.log_softmax(logits[0].double(), -1)
            nxt = int(lp.argmax())
            ids.append(nxt)
            logprobs.append(float(lp[nxt]))
            logits, state = model.step(torch.tensor([nxt]), state)
    return ids, logprobs


def abcd_greedy(model_dir, steps):
    out = subprocess.run([str(ROOT / "build/server/abcd-cli"), "generate", "--model", str(model_dir), "--prompt", PROMPT, "--max-tokens", str(steps),
                          "--temperature", "0", "--ignore-eos", "--threads", "1", "--kv-cache-format", "f32", "--json"], check=True, capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])["token_ids"]


def llama_cpp_greedy(bin_dir, gguf, prompt_ids, steps, port):
    server = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(gguf), "--port", str(port), "-c", "512", "-t", "1", "-np", "1", "--no-warmup",
                               "-ctk", "f32", "-ctv", "f32", "-fa", "off"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        body = {"prompt": prompt_ids, "n_predict": steps, "temperature": 0, "top_k": 1, "n_probs": 1, "ignore_eos": True,
                "cache_prompt": False, "return_tokens": True, "samplers": ["top_k"]}  # fmt: skip
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            reply = json.loads(r.read())
    finally:
        server.terminate()
        server.wait(timeout=30)
    probs = reply.get("completion_probabilities", [])
    logprobs = [p.get("logprob", math.nan) for p in probs]
    return reply["tokens"], logprobs, reply.get("tokens_evaluated")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-cpp", default="/tmp/abcd-peer/llama.cpp", help="llama.cpp source tree with build/bin")
    p.add_argument("--work", default="/tmp/abcd-llama-cpp-check")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--port", type=int, default=18431)
    p.add_argument("--json")
    args = p.parse_args(argv)
    import sentencepiece as spm

    lcpp, work = Path(args.llama_cpp), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    commit = (lcpp / ".abcd-commit").read_text().strip() if (lcpp / ".abcd-commit").exists() else "unknown"
    sp = spm.SentencePieceProcessor(model_file=str(ROOT / "models/tokenizers/lm.model"))
    prompt_ids = [1] + sp.encode(PROMPT)
    results, failed = {}, False
    for name, (model_type, extra, expect_equal) in MODELS.items():
        d, gguf = work / name, work / f"{name}.gguf"
        subprocess.run([PY, str(ROOT / "models/write_hf_checkpoint.py"), "--type", model_type, *SIZES, "--tokenizer", str(ROOT / "models/tokenizers/lm.model"),
                        *extra, "--out", str(d)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([PY, str(ROOT / "loadtest/peer/convert.py"), str(lcpp), str(d), str(gguf), "--outtype", "f32"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        ref_ids, ref_lp = reference_greedy(d, prompt_ids, args.steps)
        engine_ids = abcd_greedy(d, args.steps)
        cpp_ids, cpp_lp, evaluated = llama_cpp_greedy(lcpp / "build/bin", gguf, prompt_ids, args.steps, args.port)
        first = next((i for i, (a, b) in enumerate(zip(ref_ids, cpp_ids)) if a != b), None if len(cpp_ids) == len(ref_ids) else min(len(cpp_ids), len(ref_ids)))
        same = min(len(cpp_ids), first if first is not None else len(cpp_ids))
        lp_diff = max((abs(a - b) for a, b in zip(ref_lp[:same], cpp_lp[:same])), default=math.nan)
        r = {"type": model_type, "writer_args": extra, "prompt_tokens_evaluated": evaluated, "abcd_equals_reference": engine_ids == ref_ids,
             "llama_cpp_equals_reference": cpp_ids == ref_ids, "first_difference": first, "max_logprob_diff_while_equal": lp_diff,
             "expected_equal": expect_equal, "reference_ids": ref_ids, "llama_cpp_ids": cpp_ids}  # fmt: skip
        results[name] = r
        failed |= expect_equal and not r["llama_cpp_equals_reference"]
        print(f"{name:11s} abcd-cli == reference: {r['abcd_equals_reference']}; llama.cpp == reference: {r['llama_cpp_equals_reference']} "
              f"(first difference at step {first}; max |log-prob diff| over equal steps {lp_diff:.2e}; prompt tokens {evaluated})", flush=True)  # fmt: skip
    out = {"llama_cpp_commit": commit, "steps": args.steps, "prompt_ids": prompt_ids, "models": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
