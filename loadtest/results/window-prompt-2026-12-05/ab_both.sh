#!/bin/bash
M=/work/main/build/bench-models
for r in 1 2 3; do for w in new base; do
  echo "$w t1 r$r $(/tmp/abcd/r18/bench.$w decode --models $M/window,$M/softmax --weight_formats f32,bf16-dot,int8-dot --batches 1 --contexts 128 --threads 1 --prefill_tokens 512 --rounds 3 --steps 16 | grep -A7 '^model ' | tail -6 | awk '{printf "%s %s | ", $1, $3}')"
done; done
