#!/bin/bash
cd /work/main
for round in 1 2; do
for spec in off ngram:4; do
  for run in "repeat --temperature 0" "random --temperature 1 --seed 3"; do set -- $run
    label=$1-${spec/:/}-r$round
    build/loadtest/abcd-loadtest --launch_server build/server/abcd-server --server_args \
        "--models /tmp/bench-gpu/abc --weight_format int8 --threads 2 --prefix_cache_mb 0 --speculative $spec" \
        --endpoint http-completions --concurrency 1 --num_requests 16 --warmup 2 --ignore_eos \
        --prompts /tmp/abcd-spec-prompts/$1.jsonl --output_tokens 128 "${@:2}" \
        > /tmp/spec323/$label.txt 2>&1
    echo "$label: $(grep -h -E 'Output token throughput|speculative draft' /tmp/spec323/$label.txt | tr -s ' ' | tr '\n' ';')"
  done
done
done
