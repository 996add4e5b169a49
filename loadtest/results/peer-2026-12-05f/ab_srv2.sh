#!/bin/bash
for r in 1 2 3; do for w in base spare cut; do
  echo "$w r$r [] $(/tmp/abcd/r19/srvprobe_n.sh $w "")"
  [ $w != spare ] && echo "$w r$r [--prefix_cache_mb 0] $(/tmp/abcd/r19/srvprobe_n.sh $w "--prefix_cache_mb 0")"
done; done
