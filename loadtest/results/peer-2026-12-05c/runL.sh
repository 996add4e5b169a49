#!/bin/bash
# cpu::Linear alone on a matrix that fits L3 (2048 x 5632: 23 MB bf16, 11.5 MB int8) beside one
# that cannot (2048 x 45056: 185 MB / 92 MB, streamed from DRAM as a model's layers are), under
# both locks: flock /tmp/abcd-build.lock flock /tmp/abcd-bench.lock bash runL.sh BENCH
B=${1:-/tmp/abcd/bench.before}
uptime
$B linear --weight_formats bf16-dot,int8-dot --shapes 2048x5632,2048x45056 --rows 8,32,64 \
  --threads 2 --rounds 3
uptime
