#!/usr/bin/env python3
"""Sums cpu::Linear-alone times (runQ.sh's linear tables) into one decode step's products for the
1.3B-width Llama (8 layers of q 2048x2048, k and v 2048x512, o 2048x2048, gate and up
2048x5632, down 5632x2048, then the 2048x8000 head), per binary, format and row count.
Usage: products_alone.py Q.log"""
import re
import sys

PER_STEP = {("2048", "2048"): 16, ("2048", "512"): 16, ("2048", "5632"): 16, ("5632", "2048"): 8,
            ("2048", "8000"): 1}

def main(path):
    binary = None
    sums = {}
    for line in open(path):
        m = re.match(r"== linear (\w+)", line)
        if m:
            binary = m.group(1)
            continue
        m = re.match(r"(\S+)\s+(\d+) x (\d+)\s+(\d+)\s+([\d.]+)", line)
        if m and binary:
            fmt, i, o, rows, us = m.groups()
            key = (binary, fmt, int(rows))
            sums[key] = sums.get(key, 0.0) + PER_STEP[(i, o)] * float(us) / 1000
    for key in sorted(sums):
        print(f"{key[0]:7s} {key[1]:9s} rows {key[2]:3d}: products alone {sums[key]:7.2f} ms a step")

if __name__ == "__main__":
    main(sys.argv[1])
