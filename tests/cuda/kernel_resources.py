#!/usr/bin/env python3
"""Pins the registers and spills of abcd's CUDA kernels, without a GPU.

Compiles each engine/**/*.cu for sm_90 (the H100/H200 the backend has run on) with
`nvcc -cubin --resource-usage`, reads what ptxas reports for every abcd kernel, and compares it
with tests/cuda/kernel_resources.txt. It fails when a kernel uses more registers or spills more
than recorded, or when the set of kernels changed. Registers decide how many blocks fit on an SM:
at 256 threads a block, 64 registers leave 4 blocks, 80 leave 3, 96 or 128 leave 2. Such a rise
once made the abc and linear state kernels 14-44 % slower on an H200, and CI, which has no GPU,
could not see it (loadtest/results/cuda-h200-recheck-2026-11-27.md).

  tests/cuda/kernel_resources.py --nvcc NVCC --source ROOT            # check
  tests/cuda/kernel_resources.py --nvcc NVCC --source ROOT --update   # rewrite the record

Fewer registers than recorded pass (with a note to update the record).
"""

import argparse
import concurrent.futures
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ARCH = "sm_90"
RECORD = Path(__file__).with_name("kernel_resources.txt")
ENTRY = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"Used (\d+) registers")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def without_parameters(signature):
    """`void ns::Kernel<1, false>(Args, int)` -> `ns::Kernel<1, false>`, anonymous namespaces
    dropped."""
    signature = signature.replace("(anonymous namespace)::", "")
    signature = signature.removeprefix("void ")  # a template's symbol carries its return type
    depth = 0
    for i, c in enumerate(signature):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return signature[:i]
    return signature


def compile_file(nvcc, root, source):
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [nvcc, "-cubin", f"-arch={ARCH}", "--resource-usage", "-O3", "-DNDEBUG",
             "--expt-relaxed-constexpr", "-std=c++20", f"-I{root}", str(source), "-o",
             str(Path(tmp) / "kernels.cubin")],
            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{source}: nvcc failed\n{result.stderr}")
    kernels = {}
    current = None
    for line in result.stderr.splitlines():
        if m := ENTRY.search(line):
            current = m.group(1)
            kernels[current] = {"registers": 0, "spills": 0}
        elif current and (m := FRAME.search(line)):
            kernels[current]["spills"] = int(m.group(2)) + int(m.group(3))
        elif current and (m := REGISTERS.search(line)):
            kernels[current]["registers"] = int(m.group(1))
            current = None
    return kernels


def measure(nvcc, root):
    sources = sorted((root / "engine").rglob("*.cu"))
    if not sources:
        raise RuntimeError(f"no .cu files under {root / 'engine'}")
    mangled = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for kernels in pool.map(lambda s: compile_file(nvcc, root, s), sources):
            mangled.update(kernels)
    names = demangle(list(mangled))
    measured = {}
    for symbol, usage in mangled.items():
        name = without_parameters(names[symbol])
        if name.startswith("abcd::"):  # not CUB's kernels: their resources are CUB's business
            measured[name] = usage
    return measured


def read_record():
    record = {}
    for line in RECORD.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        registers, spills, name = line.split(maxsplit=2)
        record[name] = {"registers": int(registers), "spills": int(spills)}
    return record


def write_record(measured):
    lines = [f"# registers, spill bytes (stores + loads) and kernel, {ARCH}; written by",
             "# tests/cuda/kernel_resources.py --update"]
    lines += [f"{u['registers']} {u['spills']} {name}" for name, u in sorted(measured.items())]
    RECORD.write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()
    measured = measure(args.nvcc, args.source.resolve())
    if args.update:
        write_record(measured)
        print(f"wrote {RECORD} ({len(measured)} kernels)")
        return 0
    record = read_record()
    failures = []
    for name in sorted(set(record) | set(measured)):
        if name not in measured:
            failures.append(f"{name}: recorded but not compiled any more (--update)")
        elif name not in record:
            failures.append(f"{name}: new kernel, {measured[name]['registers']} registers; "
                            "record it with --update")
        else:
            was, now = record[name], measured[name]
            if now["registers"] > was["registers"] or now["spills"] > was["spills"]:
                failures.append(f"{name}: {was['registers']} -> {now['registers']} registers, "
                                f"{was['spills']} -> {now['spills']} spill bytes")
            elif now != was:
                print(f"note: {name} uses fewer resources than recorded ({was} -> {now}); "
                      "--update to pin that")
    for failure in failures:
        print("FAIL", failure)
    print(f"{len(measured)} kernels, {len(failures)} over their record")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
