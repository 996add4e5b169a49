#!/bin/bash
B=/tmp/h47c/abcd-build/loadtest/abcd-bench
uptime
$B linear --weight_formats bf16-dot,int8-dot --shapes 2048x2048,2048x512,2048x5632,5632x2048,2048x8000 --rows 8,32,64 --threads 2 --rounds 3 --json /tmp/h47c/out/E-linear.json
$B decode --models /tmp/h47/llama-1.3b-8l --weight_formats bf16-dot,int8-dot --batches 8,32,64 --contexts 128 --threads 2 --steps 8 --rounds 3 --prefill_tokens 0 --json /tmp/h47c/out/E-decode.json
uptime
