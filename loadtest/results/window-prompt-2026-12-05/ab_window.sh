#!/bin/bash
# A/B of base (ed383a2) and new binaries: bench models' window and softmax prompts + batch-1 steps; Llama 1.3B-8l 512 prefill.
OUT=/tmp/abcd/r18/ab; mkdir -p $OUT
BASE=/tmp/abcd/r18/bench.base; NEW=/tmp/abcd/r18/bench.new
M=/work/main/build/bench-models
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/log; }
for r in 1 2; do
  if [ $r = 1 ]; then ORDER="new base"; else ORDER="base new"; fi
  for which in $ORDER; do
    B=$BASE; [ $which = new ] && B=$NEW
    for t in 1 2; do
      stamp "small $which t$t r$r"
      $B decode --models $M/window,$M/softmax --weight_formats f32,bf16-dot,int8-dot --batches 1 --contexts 128 --threads $t --prefill_tokens 512 --rounds 3 --steps 16 --json $OUT/small_${which}_t${t}_r$r.json > $OUT/small_${which}_t${t}_r$r.txt 2>&1
    done
    stamp "llama $which r$r"
    $B decode --models /tmp/h47/llama-1.3b-8l --weight_formats bf16 --batches 1 --contexts 16 --steps 2 --rounds 2 --prefill_tokens 512 --threads 2 --json $OUT/llama_${which}_r$r.json > $OUT/llama_${which}_r$r.txt 2>&1
  done
done
stamp done
