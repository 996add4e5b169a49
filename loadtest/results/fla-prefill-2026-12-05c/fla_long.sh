#!/bin/bash
OUT=/tmp/abcd/r18/fla; mkdir -p $OUT
B=${1:-/tmp/abcd/r18/bench.new}
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/log; }
for p in 4096 8192; do
  stamp "prefill $p"
  $B decode --models /tmp/h47/llama-1.3b-8l,/tmp/h47/gsa-1.3b-8l,/tmp/h47/gla-1.3b-8l,/tmp/h47/retnet-1.3b-8l,/tmp/h47/hgrn2-1.3b-8l --batches 1 --contexts 16 --steps 2 --rounds 2 --prefill_tokens $p --threads 2 --json $OUT/fla$p.json > $OUT/fla$p.txt 2>&1
done
stamp done
