"""Write the CUDA benchmark document from what `deploy/scripts/gpu_check.sh run` left in its
output folder, so every figure in it comes from one run on one GPU:

  python3 loadtest/cuda_report.py .gpu/out > loadtest/results/cuda-<gpu>-<date>.md

Reads gpu.txt (nvidia-smi), cuda_bench.json (abcd-bench-cuda all) and, when present, the
server runs server_cuda-c<N>.json / server_cpu-c<N>.json (abcd-loadtest). Prints markdown:
the device and date, the copy bandwidth, the fused state kernels against the 70% goal, decode
steps against the floor (goals 1.5x at batch >= 256, 3x at batch 1), abc/rfa/t2r vs softmax
throughput at each context, memory per sequence, the engine vs PyTorch (eager and CUDA graphs)
at batch 1 and 256, and the server on CUDA vs the CPU. Goals are judged here, from the numbers.
"""

import argparse
import json
import re
import sys
from pathlib import Path

KERNEL_GOAL = 0.70  # fused state kernels: fraction of copy bandwidth at batch >= 256
FLOOR_GOAL_LARGE = 1.5  # decode step / floor at batch >= 256
FLOOR_GOAL_BATCH1 = 3.0  # decode step / floor at batch 1 (CUDA graphs)


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def verdict(ok):
    return "met" if ok else "**missed**"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def device_section(bench, gpu_text):
    device = bench.get("device", {})
    bandwidth = bench.get("bandwidth", {}).get("bytes_per_second", 0)
    lines = [
        f"# CUDA backend benchmarks: {device.get('name', 'unknown GPU')}, {device.get('date', 'unknown date')}",
        "",
        f"- Device: {device.get('name', '?')}, {device.get('sms', '?')} SMs.",
    ]
    if gpu_text:
        lines.append(f"- nvidia-smi: `{gpu_text.strip().splitlines()[-1]}`.")
    lines.append(f"- Device-to-device copy bandwidth (bytes read + written): {bandwidth / 1e9:.0f} GB/s. "
                 "Every floor below is `(weight_bytes + 2 * batch * state_bytes) / copy bandwidth`.")
    if "command" in bench:
        lines.append(f"- Command: `{bench['command']}`.")
    return "\n".join(lines)


def kernels_section(kernels):
    rows, large = [], []
    for k in kernels:
        fraction = k["fraction_of_copy_bandwidth"]
        rows.append([k["kernel"], k["batch"], human_bytes(k["state_bytes_per_sequence"]),
                     f"{k['seconds'] * 1e6:.1f}", f"{k['bytes_per_second'] / 1e9:.0f}", f"{fraction:.0%}"])
        if k["batch"] >= 256:
            large.append(fraction)
    text = "## Fused state kernels alone\n\n" + table(
        ["kernel", "batch", "state/seq", "us", "GB/s", "of copy bandwidth"], rows)
    if large:
        worst = min(large)
        text += (f"\n\nGoal: >= {KERNEL_GOAL:.0%} of copy bandwidth at batch >= 256. Worst: {worst:.0%}: "
                 f"{verdict(worst >= KERNEL_GOAL)}.")
    return text


def decode_section(decode):
    rows, large, batch1 = [], [], []
    for d in decode:
        ratio = d["step_seconds"] / d["floor_seconds"]
        context = "any" if d["context"] == 0 else d["context"]
        rows.append([d["model"], context, d["batch"], human_bytes(d["state_bytes_per_sequence"]),
                     f"{d['step_seconds'] * 1e3:.3f}", f"{d['floor_seconds'] * 1e3:.3f}", f"{ratio:.2f}",
                     f"{d['tokens_per_second']:.0f}", f"{d.get('eager_step_seconds', d['step_seconds']) * 1e3:.3f}",
                     "yes" if d.get("graphs") else "no"])
        if d["batch"] >= 256:
            large.append((ratio, d))
        if d["batch"] == 1:
            batch1.append((ratio, d))
    text = "## Decode steps (greedy, sampled on the device)\n\n" + table(
        ["model", "context", "batch", "state/seq", "step ms", "floor ms", "x floor", "tokens/s",
         "eager ms", "graphs"], rows)
    goals = []
    for name, points, goal in (("batch >= 256", large, FLOOR_GOAL_LARGE), ("batch 1", batch1, FLOOR_GOAL_BATCH1)):
        if points:
            worst, where = max(points, key=lambda p: p[0])
            goals.append(f"- {name}: goal <= {goal}x the floor; worst {worst:.2f}x "
                         f"({where['model']}, context {where['context'] or 'any'}, batch {where['batch']}): "
                         f"{verdict(worst <= goal)}.")
    if goals:
        text += "\n\n" + "\n".join(goals)
    return text


def versus_softmax_section(decode):
    """Tokens/s of each bounded model over softmax's at the same batch, per softmax context."""
    softmax = {}
    bounded = {}
    for d in decode:
        if d["context"] == 0:
            bounded.setdefault(d["model"], {})[d["batch"]] = d
        elif "softmax" in d["model"]:
            softmax.setdefault(d["context"], {})[d["batch"]] = d
    if not softmax or not bounded:
        return ""
    rows = []
    for context in sorted(softmax):
        for batch in sorted(softmax[context]):
            s = softmax[context][batch]
            for model in sorted(bounded):
                b = bounded[model].get(batch)
                if b is None:
                    continue
                served = s["step_seconds"] / b["step_seconds"]
                eager = s.get("eager_step_seconds", s["step_seconds"]) / b.get("eager_step_seconds", b["step_seconds"])
                rows.append([model, context, batch, f"{served:.2f}x", f"{eager:.2f}x",
                             f"{s['state_bytes_per_sequence'] / b['state_bytes_per_sequence']:.1f}x"])
    return ("## Bounded state vs softmax of the same size\n\nThroughput of each model over softmax's "
            "at the same batch and softmax context (as served: both with CUDA graphs; eager: "
            "both without), and softmax's memory per sequence over the model's.\n\n"
            + table(["model", "softmax context", "batch", "throughput (served)", "throughput (eager)",
                     "softmax memory / seq"], rows))


def reference_section(reference):
    rows = []
    for r in reference.get("results", []):
        graph = r.get("reference_cuda_graph") or {}
        graph_ms = f"{graph['reference_step_ms']:.3f}" if "reference_step_ms" in graph else "-"
        graph_speedup = f"{graph['speedup']:.2f}x" if "speedup" in graph else (graph.get("note") or "-")
        rows.append([r["label"], r["batch"], f"{r['engine_step_ms']:.3f}", f"{r['reference_step_ms']:.3f}",
                     f"{r['speedup']:.2f}x", graph_ms, graph_speedup,
                     f"{r['argmax_agree']}/{r['argmax_steps']}", f"{r['max_abs_logit_diff']:.2e}"])
    return (f"## Engine vs the PyTorch reference (torch {reference.get('torch', '?')}, same GPU, checkpoint "
            "and tokens)\n\n" + table(["model", "batch", "engine ms/step", "torch eager ms/step", "vs eager",
                                       "torch graph ms/step", "vs graph", "argmax =", "max abs dlogit"], rows))


def server_section(out_dir):
    runs = {}
    for path in sorted(out_dir.glob("server_*-c*.json")):
        match = re.fullmatch(r"server_(\w+)-c(\d+)\.json", path.name)
        if match:
            runs.setdefault(int(match.group(2)), {})[match.group(1)] = json.loads(path.read_text())
    if not runs:
        return ""
    rows = []
    for concurrency in sorted(runs):
        for device in ("cuda", "cpu"):
            r = runs[concurrency].get(device)
            if r is None:
                continue
            rows.append([device, concurrency, r["completed"], r["failed"], f"{r['output_throughput']:.0f}",
                         f"{r['median_ttft_ms']:.1f}", f"{r['median_tpot_ms']:.2f}", f"{r['p99_tpot_ms']:.2f}"])
        pair = runs[concurrency]
        if "cuda" in pair and "cpu" in pair and pair["cpu"]["output_throughput"] > 0:
            rows.append(["cuda / cpu", concurrency, "", "",
                         f"{pair['cuda']['output_throughput'] / pair['cpu']['output_throughput']:.1f}x", "", "", ""])
    return ("## abcd-server end to end (shipped LM, HTTP completions, greedy, 64 new tokens)\n\n"
            + table(["device", "streams", "completed", "failed", "output tok/s", "median TTFT ms",
                     "median TPOT ms", "p99 TPOT ms"], rows))


def render(out_dir):
    out_dir = Path(out_dir)
    bench = json.loads((out_dir / "cuda_bench.json").read_text())
    gpu = out_dir / "gpu.txt"
    sections = [device_section(bench, gpu.read_text() if gpu.exists() else "")]
    if bench.get("kernels"):
        sections.append(kernels_section(bench["kernels"]))
    if bench.get("decode"):
        sections.append(decode_section(bench["decode"]))
        sections.append(versus_softmax_section(bench["decode"]))
    if bench.get("reference"):
        sections.append(reference_section(bench["reference"]))
    sections.append(server_section(out_dir))
    return "\n\n".join(s for s in sections if s) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="gpu_check.sh's output folder (.gpu/out)")
    args = parser.parse_args()
    sys.stdout.write(render(args.out_dir))


if __name__ == "__main__":
    main()
