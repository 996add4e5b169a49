#!/bin/bash
for r in 1 2 3; do for w in base new; do
  for f in "" "--prefix_cache_mb 0"; do echo "$w r$r [$f] $(/tmp/abcd/r19/srvprobe_n.sh $w "$f")"; done
done; done
