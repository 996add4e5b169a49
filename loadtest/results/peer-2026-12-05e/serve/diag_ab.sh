#!/bin/bash
cd /tmp/abcd/r18
for r in 1 2 3; do for w in base new; do
  echo "== $(date -u +%H:%M:%S) $w r$r | $(uptime | sed 's/.*load/load/')"
  ABCD_BUILD=/tmp/abcd/r18/$w /usr/bin/python3 diag.py 1 1032 1 2>&1 | tail -1
done; done
