#!/bin/bash
cd /work/main
uptime
/usr/bin/python3 loadtest/peer/peer.py --hf /tmp/h47/llama-1.3b-8l --llama-bin /tmp/abcd-peer/llama.cpp/build/bin --abcd-build /tmp/abcd-head/build --rows decode --contexts 32768 --threads 1 --formats bf16,int8 --rounds 1 --json /tmp/abcd/r18/peer_32k_t1.json --out /tmp/abcd/r18/peer_32k_t1.md
echo rc=$?
uptime
