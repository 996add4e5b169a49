"""abcd and llama.cpp side by side on the same Hugging Face Llama (loadtest/peer/README.md).

Usage (from the repository root, after loadtest/peer/build_llama_cpp.sh):
  /usr/bin/python3 loadtest/peer/peer.py --hf DIR --llama-bin /tmp/abcd-peer/llama.cpp/build/bin \
      [--rows greedy,decode,prefill,batched] [--threads 1,2] [--contexts 128,2048,8192]
      [--prefill 512,2048] [--batches 8,32] [--rounds 3] [--out FILE.md]

Converts DIR with llama.cpp's own converter (bf16 and q8_0 GGUF, cached next to --work), checks
that both engines produce the same greedy continuation of the same prompt token ids (the two
servers, /v1/completions), then times each row on both, the systems taking turns within every
round, and writes a Markdown table (median over rounds) with the machine, the load before and
after, and both commits. Not in CI; it takes minutes to hours depending on the rows.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(message):
    print(message, file=sys.stderr, flush=True)


def run(cmd, **kwargs):
    log("+ " + " ".join(shlex.quote(str(c)) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kwargs).stdout


def ints(text):
    return [int(x) for x in text.split(",") if x]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hf", required=True, help="Hugging Face Llama directory (safetensors + tokenizer.model)")
    p.add_argument("--llama-bin", required=True, help="llama.cpp's build/bin (build_llama_cpp.sh prints it)")
    p.add_argument("--abcd-build", default=os.path.join(ROOT, "build"))
    p.add_argument("--work", default="/tmp/abcd-peer/work", help="where the GGUF files and raw outputs go")
    p.add_argument("--rows", default="greedy,decode,prefill,batched")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--contexts", default="128,2048,8192")
    p.add_argument("--prefill", default="512,2048")
    p.add_argument("--batches", default="8,32")
    p.add_argument("--batch-context", type=int, default=128)
    p.add_argument("--formats", default="bf16,int8", help="bf16 (vs bf16 GGUF) and int8 (vs q8_0)")
    p.add_argument("--gen", type=int, default=32, help="decode tokens timed per point")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="Markdown file for the table (default: stdout)")
    return p.parse_args(argv)


def commit_of(path):
    try:
        return run(["git", "-C", path, "rev-parse", "--short=12", "HEAD"]).strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        marker = os.path.join(path, ".abcd-commit")
        return open(marker).read().strip()[:12] if os.path.exists(marker) else "unknown"


def load():
    return open("/proc/loadavg").read().split()[:3]


def gguf(args, outtype):
    os.makedirs(args.work, exist_ok=True)
    out = os.path.join(args.work, os.path.basename(os.path.normpath(args.hf)) + f"-{outtype}.gguf")
    if not os.path.exists(out):
        llama_cpp = os.path.dirname(os.path.dirname(os.path.normpath(args.llama_bin)))
        run([sys.executable, os.path.join(ROOT, "loadtest/peer/convert.py"), llama_cpp, args.hf, out, "--outtype", outtype])
    return out


# --- servers (greedy check) -------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer in {seconds} s")


def complete(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        answer = json.load(r)
    return answer["choices"][0]["text"], answer.get("usage", {})


def greedy(args, bf16_gguf, threads):
    """Same prompt ids (abcd adds the bos itself; llama.cpp's server takes the ids as given)."""
    prompts = [[279, 896, 264, 260], [450, 1234, 77, 3000, 12, 9, 600], list(range(100, 164))]
    results = []
    a_port, l_port = free_port(), free_port()
    abcd = subprocess.Popen([os.path.join(args.abcd_build, "server/abcd-server"), "--models", args.hf, "--http_port", str(a_port),
                             "--grpc_port", "0", "--threads", str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{a_port}/healthz")
        for ids in prompts:
            results.append({"ids": ids, "abcd": complete(a_port, ids, 16)})
    finally:
        abcd.terminate()
        abcd.wait()
    llama = subprocess.Popen([os.path.join(args.llama_bin, "llama-server"), "-m", bf16_gguf, "--port", str(l_port), "-t", str(threads),
                              "-c", "4096", "-np", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{l_port}/health")
        for r in results:
            r["llama.cpp"] = complete(l_port, [1] + r["ids"], 16)
    finally:
        llama.terminate()
        llama.wait()
    return results


# --- timed rows -------------------------------------------------------------------------------


def abcd_bench(args, fmt, threads, batches, contexts, prefill=0):
    with tempfile.NamedTemporaryFile(suffix=".json", dir=args.work, delete=False) as f:
        path = f.name
    cmd = [os.path.join(args.abcd_build, "loadtest/abcd-bench"), "decode", "--models", args.hf, "--weight_formats", fmt,
           "--threads", threads, "--batches", ",".join(map(str, batches)), "--contexts", ",".join(map(str, contexts)),
           "--rounds", 1, "--steps", args.gen if max(batches) == 1 else 4, "--json", path]
    if prefill:
        cmd += ["--prefill_tokens", prefill]
    run(cmd)
    data = json.load(open(path))
    os.unlink(path)
    points = {(p["batch"], p["context"]): p["tokens_per_s"] for p in data["models"][0]["points"]}
    return points, (data["prefill"][0]["prompt_tokens_per_s"] if prefill else None)


def llama_bench(args, model, threads, prompt, gen, depth):
    out = run([os.path.join(args.llama_bin, "llama-bench"), "-m", model, "-t", threads, "-p", prompt, "-n", gen, "-d", depth,
               "-r", 1, "-o", "json"])
    return json.loads(out)[0]["avg_ts"]


def llama_batched(args, model, threads, batch, context):
    out = run([os.path.join(args.llama_bin, "llama-batched-bench"), "-m", model, "-t", threads, "-c", batch * (context + 64) + 64,
               "-npp", context, "-ntg", 32, "-npl", batch])
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit() and int(cells[2]) == batch:
            return float(cells[7])  # S_TG t/s
    raise RuntimeError("llama-batched-bench printed no row for batch %d:\n%s" % (batch, out))


def main(argv):
    args = parse_args(argv)
    rows = args.rows.split(",")
    threads_list = ints(args.threads)
    formats = args.formats.split(",")
    started = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    load_before = load()
    models = {"bf16": gguf(args, "bf16")}
    if "int8" in formats:
        models["int8"] = gguf(args, "q8_0")
    lines = []
    if "greedy" in rows:
        for r in greedy(args, models["bf16"], threads_list[-1]):
            same = r["abcd"][0] == r["llama.cpp"][0]
            lines.append(f"greedy, prompt ids {r['ids'][:4]}... ({len(r['ids'])}): {'same' if same else 'DIFFERENT'}"
                         f" | abcd {json.dumps(r['abcd'][0])} | llama.cpp {json.dumps(r['llama.cpp'][0])}")
    # name -> [(abcd, llama.cpp) per round]
    results = {}
    for rnd in range(args.rounds):
        for threads in threads_list:
            for fmt in formats:
                peer = models["bf16" if fmt == "bf16" else "int8"]
                peer_name = "bf16" if fmt == "bf16" else "q8_0"
                abcd_fmt = "bf16" if fmt == "bf16" else "int8-dot"
                if "decode" in rows:
                    for ctx in ints(args.contexts):
                        a = abcd_bench(args, abcd_fmt, threads, [1], [ctx])[0][(1, ctx)]
                        b = llama_bench(args, peer, threads, 0, args.gen, ctx)
                        results.setdefault(f"batch-1 decode, ctx {ctx}, {threads} thr, {abcd_fmt} vs {peer_name}", []).append((a, b))
                if "prefill" in rows:
                    for n in ints(args.prefill):
                        a = abcd_bench(args, abcd_fmt, threads, [1], [16], prefill=n)[1]
                        b = llama_bench(args, peer, threads, n, 0, 0)
                        results.setdefault(f"{n}-token prefill, {threads} thr, {abcd_fmt} vs {peer_name}", []).append((a, b))
                if "batched" in rows:
                    for batch in ints(args.batches):
                        a = abcd_bench(args, abcd_fmt, threads, [batch], [args.batch_context])[0][(batch, args.batch_context)]
                        b = llama_batched(args, peer, threads, batch, args.batch_context)
                        results.setdefault(f"batch-{batch} decode, ctx {args.batch_context}, {threads} thr, {abcd_fmt} vs {peer_name}",
                                           []).append((a, b))
        log(f"round {rnd + 1} of {args.rounds} done")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    out = [f"# abcd vs llama.cpp, {started}", "",
           f"Machine: {cpu}, {os.cpu_count()} cores; load average before {' '.join(load_before)}, after {' '.join(load())}.",
           f"abcd {commit_of(ROOT)}, llama.cpp {commit_of(os.path.dirname(os.path.dirname(os.path.normpath(args.llama_bin))))};"
           f" model {args.hf}; median of {args.rounds} rounds, the systems alternating within each round (tokens/s).", "",
           "Command: `" + " ".join(shlex.quote(a) for a in ["peer.py"] + list(argv)) + "`", ""]
    out += [f"- {l}" for l in lines]
    out += ["", "| row | abcd | llama.cpp | abcd / llama.cpp |", "|---|---|---|---|"]
    for name, pairs in results.items():
        a = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        out.append(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
    text = "\n".join(out) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
