#!/bin/bash
# Block A: the decode table old (2d0a81e) vs HEAD (e6fb34e), long contexts, fla 2048 prefill, peer 1-thread rows.
set -u
OUT=/tmp/abcd/r17
OLD=/tmp/abcd-old/build/loadtest/abcd-bench
NEW=/tmp/abcd-head/build/loadtest/abcd-bench
M=/work/main/build/bench-models
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/A.log; }
table() { # bin tag threads
  stamp "table $2 t$3"
  $1 decode --models $M/abc,$M/rfa,$M/t2r,$M/elu,$M/window,$M/softmax \
    --weight_formats f32,bf16,bf16-dot,int8,int8-dot --batches 1,8,32,64 --contexts 128 \
    --threads $3 --prefill_tokens 512 --rounds 2 --json $OUT/table_$2_t$3.json > $OUT/table_$2_t$3.txt 2>&1
}
long() {
  stamp "long $2 t$3"
  $1 decode --models $M/abc,$M/softmax --batches 1 --contexts 2048,8192,32768 \
    --threads $3 --prefill_tokens 0 --steps 16 --rounds 2 --weight_formats f32 --json $OUT/long_$2_t$3.json > $OUT/long_$2_t$3.txt 2>&1
}
table $NEW new 2; table $OLD old 2; table $NEW new 1; table $OLD old 1
long $NEW new 2; long $OLD old 2; long $NEW new 1; long $OLD old 1
stamp "fla 2048"
H=/tmp/h47
$NEW decode --models $H/llama-1.3b-8l,$H/gsa-1.3b-8l,$H/gla-1.3b-8l,$H/retnet-1.3b-8l,$H/hgrn2-1.3b-8l \
  --batches 1 --contexts 16 --steps 2 --rounds 2 --prefill_tokens 2048 --threads 2 \
  --json $OUT/fla2048.json > $OUT/fla2048.txt 2>&1
stamp "done"
