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
import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import random
import tempfile
import threading
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
    p.add_argument("--hf", default="", help="Hugging Face Llama directory (safetensors + tokenizer.model)")
    p.add_argument("--llama-bin", default="", help="llama.cpp's build/bin (build_llama_cpp.sh prints it)")
    p.add_argument("--abcd-build", default=os.path.join(ROOT, "build"))
    p.add_argument("--work", default="/tmp/abcd-peer/work", help="where the GGUF files and raw outputs go")
    p.add_argument("--rows", default="greedy,decode,prefill,batched")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--contexts", default="128,2048,8192")
    p.add_argument("--prefill", default="512,2048")
    p.add_argument("--batches", default="8,32")
    p.add_argument("--batch-contexts", default="128,2048")
    p.add_argument("--streams", default="1,8,32", help="serve row: concurrent SSE streams")
    p.add_argument("--serve-prompt", type=int, default=128, help="serve row: prompt ids per request (+ the bos)")
    p.add_argument("--serve-out", type=int, default=64, help="serve row: output tokens per request (ignore_eos)")
    p.add_argument("--serve-requests", type=int, default=8, help="serve row: requests per stream (closed loop; 8 so the p99s are not the maximum of a few)")
    p.add_argument("--abcd-server-args", default="", help="extra abcd-server flags for the serve row")
    p.add_argument("--json", help="also write the raw per-round results here (for --merge)")
    p.add_argument("--merge", help="comma-separated --json files of earlier runs: table of all of them, nothing run")
    p.add_argument("--formats", default="bf16,int8", help="bf16, bf16-exact (vs the bf16 GGUF) and int8 (vs q8_0): FORMATS")
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


def mtime(args, binary):
    path = os.path.join(args.abcd_build, binary)
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(path))) if os.path.exists(path) else "absent"


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


def bench_knows_cpu_compute(args):
    """abcd-bench decode takes --cpu_compute since c70dc46 (before it, bf16 weights meant fp32 products)."""
    if not hasattr(args, "_cpu_compute"):
        help_text = subprocess.run([os.path.join(args.abcd_build, "loadtest/abcd-bench"), "--help"], capture_output=True, text=True)
        args._cpu_compute = "cpu_compute" in help_text.stdout + help_text.stderr
    return args._cpu_compute


def abcd_bench(args, fmt, threads, batches, contexts, prefill=0):
    with tempfile.NamedTemporaryFile(suffix=".json", dir=args.work, delete=False) as f:
        path = f.name
    cmd = [os.path.join(args.abcd_build, "loadtest/abcd-bench"), "decode", "--models", args.hf, "--weight_formats", fmt,
           "--threads", threads, "--batches", ",".join(map(str, batches)), "--contexts", ",".join(map(str, contexts)),
           "--rounds", 1, "--steps", args.gen if max(batches) == 1 else 4, "--json", path]
    cmd += ["--prefill_tokens", prefill]  # 0: none
    if fmt == "bf16" and bench_knows_cpu_compute(args):
        cmd += ["--cpu_compute", "fp32"]  # exact products even where the default is bf16 ones
    run(cmd)
    data = json.load(open(path))["decode"]
    os.unlink(path)
    points = {(p["batch"], p["context"]): p["tokens_per_s"] for p in data["models"][0]["points"]}
    return points, (data["prefill"][0]["prompt_tokens_per_s"] if prefill else None)


def llama_bench(args, model, threads, prompt, gen, depth):
    out = run([os.path.join(args.llama_bin, "llama-bench"), "-m", model, "-t", threads, "-p", prompt, "-n", gen, "-d", depth,
               "-r", 1, "-o", "json"])
    return json.loads(out)[0]["avg_ts"]


def llama_batched(args, model, threads, batch, context):
    # -pps: one prompt prefilled once and shared by the batch, as abcd-bench forks one prefilled sequence.
    out = run([os.path.join(args.llama_bin, "llama-batched-bench"), "-m", model, "-t", threads, "-c", batch * (context + 64) + 64,
               "-npp", context, "-ntg", 32, "-npl", batch, "-pps"])
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit() and int(cells[2]) == batch:
            return float(cells[7])  # S_TG t/s
    raise RuntimeError("llama-batched-bench printed no row for batch %d:\n%s" % (batch, out))


# --- the two servers through one SSE client --------------------------------------------------


def sse_request(port, prompt, max_tokens):
    """One streamed /v1/completions request: (send time, [arrival of every event with a choice], end)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    sent = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    arrivals = []
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        if json.loads(data).get("choices"):
            arrivals.append(time.perf_counter())
    end = time.perf_counter()
    conn.close()
    return sent, arrivals, end


def percentile(values, q):
    """numpy's linear interpolation."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q / 100.0
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def serve_load(port, streams, args, seed, bos):
    """Closed loop: `streams` clients, each sending --serve-requests requests one after another."""
    rng = random.Random(seed)
    prompts = [bos + [rng.randrange(300, 7900) for _ in range(args.serve_prompt)] for _ in range(streams * args.serve_requests)]
    lock = threading.Lock()
    records = []

    def client(i):
        for r in range(args.serve_requests):
            rec = sse_request(port, prompts[i * args.serve_requests + r], args.serve_out)
            with lock:
                records.append(rec)

    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        for f in [pool.submit(client, i) for i in range(streams)]:
            f.result()
    first = min(r[0] for r in records)
    last = max(r[2] for r in records)
    tokens = sum(len(r[1]) for r in records)
    ttft = [(r[1][0] - r[0]) * 1e3 for r in records if r[1]]
    itl = [(b - a) * 1e3 for r in records for a, b in zip(r[1], r[1][1:])]
    return {"tok_s": tokens / (last - first), "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(itl, 50), "itl_p99": percentile(itl, 99), "tokens": tokens, "requests": len(records)}


def serve(args, system, model, threads, streams_list, seed, abcd_flags=()):
    port = free_port()
    if system == "abcd":
        cmd = [os.path.join(args.abcd_build, "server/abcd-server"), "--models", args.hf, "--http_port", port, "--grpc_port", 0,
               "--threads", threads] + list(abcd_flags) + shlex.split(args.abcd_server_args)
        health, bos = "/healthz", []
    else:
        slots = max(streams_list)
        cmd = [os.path.join(args.llama_bin, "llama-server"), "-m", model, "--port", port, "-t", threads, "-np", slots,
               "-c", slots * (args.serve_prompt + args.serve_out + 64)]
        health, bos = "/health", [1]
    log("+ " + " ".join(map(str, cmd)))
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}{health}")
        sse_request(port, bos + list(range(300, 300 + args.serve_prompt)), 8)  # warm-up
        return {s: serve_load(port, s, args, seed + s, bos) for s in streams_list}
    finally:
        proc.terminate()
        proc.wait()


# --formats: name -> (llama.cpp's GGUF, abcd-bench --weight_formats, abcd-server flags). bf16 is
# abcd's default on a CPU with AVX512_BF16 (--cpu_compute auto: bf16 products, what llama.cpp does
# with bf16 weights); bf16-exact its exact fp32 products; int8 is W8A8 against q8_0.
FORMATS = {"bf16": ("bf16", "bf16-dot", ["--cpu_compute", "bf16"]),
           "bf16-exact": ("bf16", "bf16", ["--cpu_compute", "fp32"]),
           "int8": ("q8_0", "int8-dot", ["--weight_format", "int8", "--cpu_compute", "int8"])}

SERVE_METRICS = [("tok_s", "out tok/s", True), ("ttft_p50", "TTFT p50 ms", False), ("ttft_p99", "TTFT p99 ms", False),
                 ("itl_p50", "ITL p50 ms", False), ("itl_p99", "ITL p99 ms", False)]


def main(argv):
    args = parse_args(argv)
    started = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    load_before = load()
    lines = []
    # name -> [(abcd, llama.cpp) per round]; `higher` names rows where more is better.
    results, lower = {}, set()
    if args.merge:
        for path in args.merge.split(","):
            data = json.load(open(path))
            lines += data["lines"] + [f"run: {data['header']}"]
            for name, pairs in data["results"].items():
                results.setdefault(name, []).extend(map(tuple, pairs))
            lower.update(data["lower"])
    else:
        rows = args.rows.split(",")
        threads_list = ints(args.threads)
        formats = args.formats.split(",")
        models = {"bf16": gguf(args, "bf16")}
        if "int8" in formats:
            models["int8"] = gguf(args, "q8_0")
        if "greedy" in rows:
            for r in greedy(args, models["bf16"], threads_list[-1]):
                same = r["abcd"][0] == r["llama.cpp"][0]
                lines.append(f"greedy, prompt ids {r['ids'][:4]}... ({len(r['ids'])}): {'same' if same else 'DIFFERENT'}"
                             f" | abcd {json.dumps(r['abcd'][0])} | llama.cpp {json.dumps(r['llama.cpp'][0])}")
        for rnd in range(args.rounds):
            for threads in threads_list:
                for fmt in formats:
                    peer = models["int8" if fmt == "int8" else "bf16"]
                    peer_name, abcd_fmt, server_flags = FORMATS[fmt]
                    tag = f"{threads} thr, {abcd_fmt} vs {peer_name}"
                    if "decode" in rows:
                        for ctx in ints(args.contexts):
                            a = abcd_bench(args, abcd_fmt, threads, [1], [ctx])[0][(1, ctx)]
                            b = llama_bench(args, peer, threads, 0, args.gen, ctx)
                            results.setdefault(f"batch-1 decode, ctx {ctx}, {tag}", []).append((a, b))
                    if "prefill" in rows:
                        for n in ints(args.prefill):
                            a = abcd_bench(args, abcd_fmt, threads, [1], [16], prefill=n)[1]
                            b = llama_bench(args, peer, threads, n, 0, 0)
                            results.setdefault(f"{n}-token prefill, {tag}", []).append((a, b))
                    if "batched" in rows:
                        for ctx in ints(args.batch_contexts):
                            for batch in ints(args.batches):
                                a = abcd_bench(args, abcd_fmt, threads, [batch], [ctx])[0][(batch, ctx)]
                                b = llama_batched(args, peer, threads, batch, ctx)
                                results.setdefault(f"batch-{batch} decode, ctx {ctx}, {tag}", []).append((a, b))
                    if "serve" in rows:
                        streams = ints(args.streams)
                        a = serve(args, "abcd", None, threads, streams, 1000 * rnd, server_flags)
                        b = serve(args, "llama.cpp", peer, threads, streams, 1000 * rnd)
                        for s in streams:
                            for key, label, higher in SERVE_METRICS:
                                name = (f"servers, {args.serve_prompt + 1}-token prompts, {args.serve_out} out, {s} streams, "
                                        f"{label}, {tag}")
                                results.setdefault(name, []).append((a[s][key], b[s][key]))
                                if not higher:
                                    lower.add(name)
            log(f"round {rnd + 1} of {args.rounds} done")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    header = (f"{started}; load average before {' '.join(load_before)}, after {' '.join(load())}; abcd {commit_of(ROOT)}, "
              f"abcd binaries {args.abcd_build} (abcd-bench {mtime(args, 'loadtest/abcd-bench')}, abcd-server {mtime(args, 'server/abcd-server')}); "
              f"llama.cpp {commit_of(os.path.dirname(os.path.dirname(os.path.normpath(args.llama_bin)))) if args.llama_bin else '-'}; "
              f"`" + " ".join(shlex.quote(a) for a in ["peer.py"] + list(argv)) + "`")
    if args.json:
        json.dump({"header": header, "lines": lines, "results": results, "lower": sorted(lower)}, open(args.json, "w"), indent=1)
    out = [f"# abcd vs llama.cpp, {started}", "", f"Machine: {cpu}, {os.cpu_count()} cores.", "", f"Run: {header}", ""]
    out += [f"- {l}" for l in lines]
    out += ["", "Median over rounds; the ratio is abcd / llama.cpp for rates, llama.cpp / abcd for times (above 1 = abcd ahead);",
            "min-max over rounds in brackets where there was more than one.", "",
            "| row | abcd | llama.cpp | abcd ahead by |", "|---|---|---|---|"]

    def cell(values):
        m = statistics.median(values)
        return f"{m:.1f}" + (f" [{min(values):.1f}-{max(values):.1f}]" if len(values) > 1 else "")

    for name, pairs in results.items():
        a = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        ratio = b / a if name in lower else a / b
        out.append(f"| {name} | {cell([p[0] for p in pairs])} | {cell([p[1] for p in pairs])} | {ratio:.2f}x |")
    text = "\n".join(out) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
