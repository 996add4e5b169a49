#!/bin/bash
cd /work/main
exec flock /tmp/abcd-build.lock flock /tmp/abcd-bench.lock /usr/bin/python3 loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin --abcd-build /tmp/h47c/abcd-build --work /tmp/abcd-peer/work --rows serve --streams 1,8,32 --threads 2 --formats bf16 --rounds 1 --json /tmp/h47c/out/B.json --out /tmp/h47c/out/B.md
