#!/bin/bash
# Block B: the decode table and long contexts, old/new alternated; then peer rows (32k at 2 threads, 1-thread prefill/batched).
set -u
OUT=/tmp/abcd/r17
OLD=/tmp/abcd-old/build/loadtest/abcd-bench
NEW=/tmp/abcd-head/build/loadtest/abcd-bench
M=/work/main/build/bench-models
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/B.log; }
table() { stamp "table $2 t$3 r$4"
  $1 decode --models $M/abc,$M/rfa,$M/t2r,$M/elu,$M/window,$M/softmax \
    --weight_formats f32,bf16,bf16-dot,int8,int8-dot --batches 1,8,32,64 --contexts 128 \
    --threads $3 --prefill_tokens 512 --rounds 3 --json $OUT/B_table_$2_t$3_r$4.json > $OUT/B_table_$2_t$3_r$4.txt 2>&1; }
long() { stamp "long $2 t$3 r$4"
  $1 decode --models $M/abc,$M/softmax --batches 1 --contexts 2048,8192,32768 \
    --threads $3 --prefill_tokens 0 --steps 16 --rounds 3 --weight_formats f32 --json $OUT/B_long_$2_t$3_r$4.json > $OUT/B_long_$2_t$3_r$4.txt 2>&1; }
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then A=new; B=old; else A=old; B=new; fi
  for t in 2 1; do
    eval "table \$${A^^} $A $t $r"; eval "table \$${B^^} $B $t $r"
  done
done
for r in 1 2; do for t in 2 1; do long $NEW new $t $r; long $OLD old $t $r; done; done
P="/usr/bin/python3 /work/main/loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin --abcd-build /tmp/abcd-head/build"
stamp "peer 32k t2"
$P --rows decode --contexts 32768 --threads 2 --formats bf16,int8 --rounds 1 --json $OUT/peer_32k_t2.json --out $OUT/peer_32k_t2.md > $OUT/peer_32k_t2.log 2>&1
stamp "peer t1 prefill,batched"
$P --rows prefill,batched --prefill 512,2048 --batches 8,32 --batch-contexts 128,2048 --threads 1 --formats bf16,int8 --rounds 2 --json $OUT/peer_t1.json --out $OUT/peer_t1.md > $OUT/peer_t1.log 2>&1
stamp "done"
