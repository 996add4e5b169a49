#!/bin/bash
cd /work/main
exec /usr/bin/python3 loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin --abcd-build /tmp/h47c/abcd-build --work /tmp/abcd-peer/work --rows decode --contexts 128,2048,8192 --threads 1 --formats bf16,int8 --rounds 2 --json /tmp/h47c/out/F.json --out /tmp/h47c/out/F.md
