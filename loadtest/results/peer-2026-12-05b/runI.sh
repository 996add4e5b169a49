#!/bin/bash
uptime
for r in 1 2 3; do
 for v in before after; do
  echo "== $v round $r"
  /tmp/h47c/$v/abcd-bench decode --models /tmp/h47/llama-1.3b-8l --weight_formats int8-dot --batches 2,4,8,16 --contexts 128 --threads 2 --steps 8 --rounds 1 --prefill_tokens 0 2>&1 | grep -E "^ +128 +(2|4|8|16) "
 done
done
for v in before after; do
  echo "== linear $v"
  /tmp/h47c/$v/abcd-bench linear --weight_formats int8-dot --shapes 2048x2048,2048x512,2048x5632,5632x2048,2048x8000 --rows 2,4,8 --threads 2 --rounds 3 2>&1 | grep int8
done
uptime
