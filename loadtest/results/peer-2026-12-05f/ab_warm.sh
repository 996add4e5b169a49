#!/bin/bash
export REPS=3 READY=1
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then order="0 -1"; else order="-1 0"; fi
  for w in $order; do echo "warmup_tokens $w r$r $(/tmp/abcd/r19/srvprobe_n.sh warm "--warmup_tokens $w")"; done
done
