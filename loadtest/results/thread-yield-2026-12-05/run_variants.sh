#!/bin/bash
cd /work/main
OUT=/tmp/abcd/r18/yv/out; mkdir -p $OUT
M=/work/main/build/bench-models
stamp() { echo "== $(date -u +%H:%M:%S) $* | $(uptime | sed 's/.*load/load/')" | tee -a $OUT/log; }
for r in 1 2 3; do
  case $r in 1) O="orig noyield pollyield";; 2) O="pollyield orig noyield";; 3) O="noyield pollyield orig";; esac
  for v in $O; do
    D=/tmp/abcd/r18/yv/$v
    stamp "engine $v r$r"
    $D/loadtest/abcd-bench decode --models $M/softmax,$M/window,$M/abc --weight_formats int8,int8-dot,bf16-dot --batches 1,8 --contexts 128 --threads 2 --prefill_tokens 0 --rounds 5 --steps 32 --json $OUT/engine_${v}_r$r.json > $OUT/engine_${v}_r$r.txt 2>&1
    stamp "server $v r$r"
    $D/loadtest/abcd-loadtest --launch_server $D/server/abcd-server --server_args "--models models/checkpoints/abc-lm" --concurrency 1,8 --duration 8 --warmup 2 --output_tokens 64 --ignore_eos --endpoint http-completions > $OUT/server_${v}_r$r.txt 2>&1
  done
done
stamp done
