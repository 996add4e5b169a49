#!/bin/bash
cd /work/main
exec flock /tmp/abcd-build.lock flock /tmp/abcd-bench.lock /usr/bin/python3 loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin --abcd-build /tmp/h47c/abcd-build --work /tmp/abcd-peer/work --rows greedy,decode,prefill,batched --contexts 128,2048,8192 --prefill 512,2048 --batches 8,32 --batch-contexts 128,2048 --threads 2 --formats bf16,int8 --rounds 2 --json /tmp/h47c/out/A.json --out /tmp/h47c/out/A.md
