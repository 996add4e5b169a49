"""Draw the abcd-bench figures from its JSON output.

  /usr/bin/python3 loadtest/plot.py RESULTS.json [--out loadtest/plots]

Needs matplotlib (Debian: apt-get install python3-matplotlib); not part of CI. Writes
  memory_vs_length.png     attention-state bytes per sequence against generated tokens
                           (log-log), one line per layer type (the "memory" section)
  throughput_vs_batch.png  decode tokens/s against batch size, one panel per context length,
                           one line per layer type, dotted: the bandwidth floor's tokens/s
                           (the "decode" section)
  seq2seq_speed_memory.png the seeds' decode-speed figure (issue 15): greedy decode tokens/s and
                           state bytes per sequence (self + cross) against source = target
                           length, one line per model (the "seq2seq" section)
The machine (CPU model, CPU count, BLAS threads) recorded in the JSON goes in the titles.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"softmax": "tab:red", "window": "tab:purple", "abc": "tab:blue", "rfa": "tab:green", "t2r": "tab:orange", "elu": "tab:brown"}


def machine_label(results):
    m = results.get("machine", {})
    return f"{m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, {m.get('blas_threads', '?')} BLAS thread(s)"


def plot_memory(results, out):
    memory = results["memory"]
    lengths = memory["lengths"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in memory["models"]:
        name = m.get("label", m["attention"])
        ax.plot(lengths, [b / 2**20 for b in m["bytes"]], marker="o", label=f"{name}: {m['description']}", color=COLORS.get(m["attention"]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(n) for n in lengths], rotation=45, fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("tokens held by the sequence (prompt + generated)")
    ax.set_ylabel("attention state per sequence (MiB)")
    ax.set_title("Memory per sequence vs length\n" + machine_label(results), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "memory_vs_length.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def plot_throughput(results, out):
    decode = results["decode"]
    contexts = decode["contexts"]
    fig, axes = plt.subplots(1, len(contexts), figsize=(4.2 * len(contexts), 4.2), sharey=True)
    if len(contexts) == 1:
        axes = [axes]
    for ax, context in zip(axes, contexts):
        for m in decode["models"]:
            points = [p for p in m["points"] if p["context"] == context]
            batches = [p["batch"] for p in points]
            color = COLORS.get(m["attention"])
            name = m.get("label", m["attention"])
            ax.plot(batches, [p["tokens_per_s"] for p in points], marker="o", color=color, label=name)
            ax.plot(batches, [p["batch"] / (p["floor_ms"] / 1000) for p in points], linestyle=":", color=color, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xticks(decode["batches"])
        ax.set_xticklabels([str(b) for b in decode["batches"]])
        ax.set_yscale("log")
        ax.set_xlabel("batch size (sequences decoded per step)")
        ax.set_title(f"context {context} tokens", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("decode tokens/s (dotted: bandwidth floor)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Decode throughput vs batch size ({decode['bandwidth_gb_s']:.1f} GB/s copy bandwidth)\n" + machine_label(results), fontsize=9)
    fig.tight_layout()
    path = out / "throughput_vs_batch.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def plot_seq2seq(results, out):
    s2s = results["seq2seq"]
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(10, 4.2))
    for m in s2s["models"]:
        lengths = [p["length"] for p in m["points"]]
        color = COLORS.get(m["attention"])
        label = f"{m['label']}: {m['causal']} / {m['cross']}"
        speed.plot(lengths, [p["tokens_per_s"] for p in m["points"]], marker="o", color=color, label=label)
        memory.plot(lengths, [p["state_bytes"] / 2**20 for p in m["points"]], marker="o", color=color, label=label)
    for ax in (speed, memory):
        ax.set_xscale("log", base=2)
        ax.set_xticks(s2s["lengths"])
        ax.set_xticklabels([str(n) for n in s2s["lengths"]])
        ax.set_xlabel("source length = target length (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    speed.set_ylabel(f"greedy decode tokens/s (batch {s2s['batch']})")
    speed.set_ylim(bottom=0)
    memory.set_yscale("log")
    memory.set_ylabel("attention state per sequence, self + cross (MiB)")
    speed.legend(fontsize=7, loc="center", bbox_to_anchor=(0.5, 0.36))
    fig.suptitle("Seq2seq decode speed and memory vs length (transformer-base sizes, random weights)\n" + machine_label(results), fontsize=9)
    fig.tight_layout()
    path = out / "seq2seq_speed_memory.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="abcd-bench --json output")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "plots"))
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if "memory" in results:
        plot_memory(results, out)
    if "decode" in results:
        plot_throughput(results, out)
    if "seq2seq" in results:
        plot_seq2seq(results, out)


if __name__ == "__main__":
    main()
