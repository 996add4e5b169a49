#!/usr/bin/env python3
"""Per-kernel GPU time of the last decode step in an Nsight Compute CSV.

Reads the output of
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count N \
      abcd-bench-cuda decode --models DIR --batches 1 --steps 4 --no_graphs
(plain or .xz), takes the kernels from the last EmbedKernel launch on (one eager step) and
prints their time grouped by kernel name: total ns, launches, ns per launch. ncu times each
kernel alone, so the sum is an upper bound on the step, which CUDA graphs overlap.
"""
import collections
import csv
import io
import lzma
import sys


def last_step(lines):
    """(kernel name, ns) of each kernel from the last EmbedKernel on; the lines are ncu's CSV,
    interleaved with the program's own output (only lines starting with a quote are CSV)."""
    rows = list(csv.DictReader(io.StringIO("".join(l for l in lines if l.startswith('"')))))
    kernels = [(row["Kernel Name"], float(row["Metric Value"].replace(",", ""))) for row in rows
               if row["Metric Name"] == "gpu__time_duration.sum"]
    starts = [i for i, (name, _) in enumerate(kernels) if "EmbedKernel" in name]
    if not starts:
        raise ValueError("no EmbedKernel launch: not a decode step")
    return kernels[starts[-1]:]


def summarize(step):
    """[(name, launches, total ns)], dearest first."""
    totals = collections.defaultdict(lambda: [0, 0.0])
    for name, ns in step:
        totals[name[:100]][0] += 1
        totals[name[:100]][1] += ns
    return sorted(((name, count, ns) for name, (count, ns) in totals.items()),
                  key=lambda item: -item[2])


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        try:
            step = last_step(f.readlines())
        except ValueError as error:
            sys.exit(str(error))
    print(f"last step: {len(step)} kernels, {sum(t for _, t in step) / 1000:.1f} us")
    print(f"{'total ns':>10} {'launches':>8} {'ns each':>8}  kernel")
    for name, count, ns in summarize(step):
        print(f"{ns:10.0f} {count:8d} {ns / count:8.0f}  {name}")


if __name__ == "__main__":
    main()
