#!/bin/bash
B=/tmp/h47c/abcd-build/loadtest/abcd-bench
uptime
$B decode --models /tmp/h47/llama-1.3b-8l,/tmp/h47/gsa-1.3b-8l,/tmp/h47/gla-1.3b-8l,/tmp/h47/retnet-1.3b-8l,/tmp/h47/hgrn2-1.3b-8l --batches 1 --contexts 16 --steps 2 --rounds 2 --prefill_tokens 512 --threads 2 --json /tmp/h47c/out/G.json
uptime
