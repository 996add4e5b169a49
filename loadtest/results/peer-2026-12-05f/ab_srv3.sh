#!/bin/bash
export REPS=9
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then order="base cut"; else order="cut base"; fi
  for w in $order; do echo "$w r$r $(/tmp/abcd/r19/srvprobe_n.sh $w "")"; done
done
