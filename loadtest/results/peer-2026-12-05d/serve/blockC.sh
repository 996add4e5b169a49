#!/bin/bash
# Block C: the two servers at 8 and 32 streams, 8 requests a stream; abcd at 6937e42 with the prefill deadline default (1000 ms), off, 500, 2000.
set -u
OUT=/tmp/abcd/r17
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/C.log; }
stamp "peer serve"
/usr/bin/python3 /work/main/loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin \
  --abcd-build /tmp/abcd-head/build --rows serve --streams 8,32 --serve-requests 8 --threads 2 --formats bf16 --rounds 1 \
  --json $OUT/peer_serve.json --out $OUT/peer_serve.md > $OUT/peer_serve.log 2>&1
export ABCD_BUILD=/tmp/abcd-head/build
for f in "--prefill_deadline_ms 0" "--prefill_deadline_ms 500" "--prefill_deadline_ms 2000"; do
  stamp "abcd $f"
  /usr/bin/python3 /tmp/h47c/explore.py abcd 8,32 "$f" 8 >> $OUT/C_explore.log 2>&1
done
stamp done
