#!/bin/bash
# perf profile of the batched decode step (brief h-nonprod): abcd-bench decode, one weight format
# a run, batch 32 and 64 at context 128, 2 threads, under both locks:
#   flock /tmp/abcd-build.lock flock /tmp/abcd-bench.lock bash runP.sh BENCH TAG
# The report keeps the samples from the first product after loading (the 128-token prefill,
# then the decode steps) up to the bench's sgemm peak probe that follows them.
B=${1:-/tmp/abcd/bench.before}
TAG=${2:-before}
O=/tmp/abcd/nonprod
M=/tmp/h47/llama-1.3b-8l
uptime
for f in bf16-dot int8-dot; do
  echo "== $f ($TAG)"
  D=$O/perf-$TAG-$f.data
  start=$(date +%s.%N)
  perf record -F 999 -g -o $D -- \
    $B decode --models $M --weight_formats $f --batches 32,64 --contexts 128 --threads 2 \
      --steps 24 --rounds 2 --prefill_tokens 0 2>&1 | grep -E "^ +128 +(32|64) |GB/s"
  echo "wall $(echo "$(date +%s.%N) - $start" | bc) s"
  perf script -i $D -F time,ip,sym --max-stack 1 2>/dev/null |
    awk '/^ *[0-9]+\.[0-9]+:/{t=$1; next} NF>=2 {$1=""; print t, $0}' > $O/script-$TAG-$f.txt
  t0=$(grep -m1 -E "BlockBf16|StagedPanels|BlockW8A8|SumStaged" $O/script-$TAG-$f.txt | awk '{print $1}' | tr -d :)
  t1=$(grep -E "sgemm|dgemm|gemm_kernel|openblas" $O/script-$TAG-$f.txt | head -1 | awk '{print $1}' | tr -d :)
  echo "decode window $t0 - $t1 (first sample $(head -1 $O/script-$TAG-$f.txt | awk '{print $1}'), last $(tail -1 $O/script-$TAG-$f.txt | awk '{print $1}'))"
  perf report -i $D --time "$t0,$t1" --no-children --sort symbol --stdio -g none \
    --percent-limit 0.1 2>/dev/null | grep -v "^$" > $O/report-$TAG-$f.txt
  perf report -i $D --no-children --sort symbol --stdio -g none \
    --percent-limit 0.3 2>/dev/null | grep -v "^$" > $O/report-all-$TAG-$f.txt
  grep -E "^# (Samples|Total)|of event" $O/report-$TAG-$f.txt | head -3
  uptime
done
