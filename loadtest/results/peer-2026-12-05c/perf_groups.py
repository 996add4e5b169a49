#!/usr/bin/env python3
"""Groups a decode window's `perf report --no-children --sort symbol --stdio -g none` (runP.sh)
by what the step spends its time on (brief h-nonprod). Usage:
  perf_groups.py REPORT.txt STEP_MS_SUM
STEP_MS_SUM: the window's timed steps' wall time in ms (rounds x (steps + 1 warm-up) x the sum of
the batches' step ms). Prints each group's share of the window's samples and, for the step's own
groups, its CPU ms per step (2 threads: divide by 2 for wall ms)."""
import re
import sys

# first match wins; "setup" and "bench" are outside the timed steps
GROUPS = [
    ("bench: read-floor probe", r"ReadSeconds|SumFloats", "outside"),
    ("setup: fork copies, page faults, kernel", r"^\[k\]|memmove|memset|sysmalloc|_int_malloc|_int_free", "outside"),
    ("products bf16 (vdpbf16ps panels)", r"BlockBf16|BfRows|LinearPanelsAvx512Bf16", "products"),
    ("products int8 (W8A8 staged panels)", r"StagedPanels|SumStaged|StageBlock|BlockW8A8|LinearPanelsAvx512VnniW8A8", "products"),
    ("activations rounded to bf16 / quantised to 8 bits", r"RoundRowsToBf16|QuantizeRows|MagnitudeBits|nearbyint", "step"),
    ("attention: scores (ScoreRows)", r"ScoreRows|DotHeads", "step"),
    ("attention: weighted values (Accumulate)", r"Accumulate", "step"),
    ("attention: softmax, merge, KV writes", r"AdvanceRun|ExpInPlace|ExpArray|__expf|SoftmaxMerge|ReadRange|SoftmaxRead|"
     r"SoftmaxState|MaxOf|SumOf|PairOrder|KvCache|FloatsToBf16s|ReadPartial", "step"),
    ("RMSNorm, residual adds", r"RmsNorm|LayerNorm|AddInPlace|Normalize", "step"),
    ("SwiGLU", r"SiluGate|SwiGlu|Silu", "step"),
    ("RoPE, q/k/v rows", r"RotateHalf|RopeAngles|PrepareGqaRows|sincos|__cos|__sin", "step"),
    ("thread pool: spin-waits, hand-off", r"ThreadPool|WorkerLoop|RunTasks|ParallelFor|sched_yield", "step"),
    ("embedding rows, pass glue", r"PackedMatrix::Row|Model::|CpuPass|flat_hash|raw_hash", "step"),
]

def main(path, step_ms_sum):
    total = None
    rows = []
    for line in open(path):
        m = re.match(r"# Event count \(approx\.\): (\d+)", line)
        if m:
            total = int(m.group(1)) / 1e6  # cpu-clock ns -> CPU ms
        m = re.match(r"\s*([\d.]+)%\s+(\[[.k]\]\s+.*)$", line)
        if m:
            rows.append((float(m.group(1)), m.group(2).strip()))
    sums = {name: 0.0 for name, _, _ in GROUPS}
    sums["other"] = 0.0
    other = []
    for share, sym in rows:
        for name, pattern, _ in GROUPS:
            if re.search(pattern, sym):
                sums[name] += share
                break
        else:
            sums["other"] += share
            other.append((share, sym))
    steps = 1.0 * step_ms_sum
    print(f"window: {total / 1000:.1f} CPU s of samples; timed steps {steps / 1000:.2f} s wall "
          f"= {2 * steps / 1000:.2f} CPU s at 2 threads")
    print(f"{'group':52s} {'% window':>8s} {'% of step CPU':>13s}")
    kinds = {name: kind for name, _, kind in GROUPS}
    for name, value in sums.items():
        if kinds.get(name) == "outside":
            print(f"{name:52s} {value:8.2f} {'-':>13s}")
        else:
            cpu = value / 100 * total
            print(f"{name:52s} {value:8.2f} {100 * cpu / (2 * steps):13.1f}")
    print("unlisted (below the report's 0.1 % limit):", f"{100 - sum(s for s, _ in rows):.2f} %")
    print("other symbols:", ", ".join(f"{s:.2f} {n}" for s, n in sorted(other, reverse=True)[:8]))

if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
