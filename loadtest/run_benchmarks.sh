#!/usr/bin/env bash
# Produces every number and plot in loadtest/README.md, in one go, on this machine:
#   loadtest/run_benchmarks.sh            (from anywhere; BUILD_DIR defaults to build)
# Needs a build with abcd-bench, abcd-loadtest and abcd-server (ninja -C build abcd-bench
# abcd-loadtest abcd-server), Debian's python3-torch (reference timing) and, for the plots only,
# python3-matplotlib. Raw outputs go to $OUT (default $BUILD_DIR/loadtest-results); the bench
# JSON behind the plots is copied to loadtest/results/bench.json.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-$BUILD_DIR/loadtest-results}
MODELS=${MODELS:-$BUILD_DIR/bench-models}
THREADS=${THREADS:-1}
PY=/usr/bin/python3
mkdir -p "$OUT" loadtest/results

echo "== machine"
lscpu | grep -E '^(Model name|CPU\(s\))' | tee "$OUT/machine.txt"
uptime | tee -a "$OUT/machine.txt"

echo "== bench models -> $MODELS"
$PY loadtest/make_bench_models.py --out "$MODELS"

echo "== abcd-bench all"
"$BUILD_DIR/loadtest/abcd-bench" all --models_dir "$MODELS" --threads "$THREADS" \
  --reference_models "$MODELS/abc,$MODELS/rfa,$MODELS/t2r,$MODELS/softmax,models/checkpoints/abc-lm-untrained" \
  --model "$MODELS/abc,models/checkpoints/abc-lm-untrained" --rounds 5 \
  --json "$OUT/bench.json" | tee "$OUT/bench.txt"
cp "$OUT/bench.json" loadtest/results/bench.json

echo "== abcd-loadtest against abcd-server with the bundled models (10 s each)"
BUNDLED=models/checkpoints/abc-lm-untrained,models/checkpoints/abc-mt-untrained
LT=("$BUILD_DIR/loadtest/abcd-loadtest" --launch_server "$BUILD_DIR/server/abcd-server"
    --server_args "--models $BUNDLED")
"${LT[@]}" --endpoint grpc-generate --concurrency 8 --duration 10 --goodput ttft:200,tpot:20 \
  --result_json "$OUT/grpc-c8.json" | tee "$OUT/grpc-c8.txt"
"${LT[@]}" --endpoint http-completions --concurrency 8 --duration 10 --goodput ttft:200,tpot:20 \
  --result_json "$OUT/http-c8.json" | tee "$OUT/http-c8.txt"
"${LT[@]}" --endpoint grpc-generate --concurrency 1,4,16,64 --duration 10 \
  --result_json "$OUT/grpc-sweep.json" | tee "$OUT/grpc-sweep.txt"
# 160 req/s is past saturation on purpose: the server refuses the excess with
# RESOURCE_EXHAUSTED, so this run exits 1 (failed requests) and the script goes on.
"${LT[@]}" --endpoint grpc-generate --request_rate 10,40,160 --burstiness 1 --duration 10 \
  --result_json "$OUT/grpc-poisson.json" | tee "$OUT/grpc-poisson.txt" || true
"${LT[@]}" --endpoint http-translate --concurrency 4 --duration 10 --output_tokens 32 \
  --result_json "$OUT/translate-c4.json" | tee "$OUT/translate-c4.txt"

if $PY -c 'import matplotlib' 2>/dev/null; then
  $PY loadtest/plot.py "$OUT/bench.json" --out loadtest/plots
else
  echo "(matplotlib missing: apt-get install python3-matplotlib to draw the plots)"
fi
