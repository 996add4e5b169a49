#!/bin/bash
M=/work/main/build/bench-models
for r in 1 2 3; do for w in base new; do
  for t in 1 2; do
  echo "$w t$t r$r $(/tmp/abcd/r18/bench.$w decode --models $M/softmax --weight_formats f32,bf16-dot,int8-dot --batches 1 --contexts 128 --threads $t --prefill_tokens 512 --rounds 5 --steps 4 | grep -A4 '^model ' | tail -3 | awk '{printf "%s %s | ", $1, $3}')"
  done
done; done
