#!/bin/bash
# Two binaries alternated, 3 rounds (brief h-nonprod): decode step ms at batch 8 / 32 / 64,
# context 128, bf16-dot and int8-dot, 2 threads; then cpu::Linear alone at the model's shapes
# with each binary (the "products alone" sums). Under both locks:
#   flock /tmp/abcd-build.lock flock /tmp/abcd-bench.lock bash runQ.sh
M=/tmp/h47/llama-1.3b-8l
uptime
for r in 1 2 3; do
  for v in before after; do
    echo "== $v round $r"
    /tmp/abcd/bench.$v decode --models $M --weight_formats bf16-dot,int8-dot --batches 8,32,64 \
      --contexts 128 --threads 2 --steps 8 --rounds 1 --prefill_tokens 0 2>&1 |
      grep -E "^ +128 +(8|32|64) "
  done
done
for v in before after; do
  echo "== linear $v"
  /tmp/abcd/bench.$v linear --weight_formats bf16-dot,int8-dot \
    --shapes 2048x2048,2048x512,2048x5632,5632x2048,2048x8000 --rows 8,32,64 --threads 2 \
    --rounds 3 2>&1 | grep -E "^(bf16|int8)-dot"
done
uptime
