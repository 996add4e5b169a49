#!/usr/bin/env bash
# Produces every number and plot in loadtest/results/README.md, in one go, on this machine:
#   loadtest/run_benchmarks.sh            (from anywhere; BUILD_DIR defaults to build)
# Needs a build with abcd-bench, abcd-loadtest and abcd-server (ninja -C build abcd-bench
# abcd-loadtest abcd-server), Debian's python3-torch (reference timing) and, for the plots only,
# python3-matplotlib. Raw outputs go to $OUT (default $BUILD_DIR/loadtest-results); the bench
# JSON behind the plots is copied to loadtest/results/bench.json.
#   loadtest/run_benchmarks.sh prefill   only the prefill-policy load test (TTFT/ITL table)
#   loadtest/run_benchmarks.sh long-context   only softmax and abc under 2k-32k-token prompts
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

# TTFT/ITL at 1, 8, 32 and 64 streams of 128-token prompts and 128-token outputs on the trained
# abc-lm, with the time-based prefill policy and the old token policy side by side (each pair
# back to back, 12 s a run, a fresh server each, one engine thread so the client and gRPC keep
# the other core of a 2-core machine). gRPC Generate has no ignore_eos, so a request may end at
# EOS: the table reports the mean output length. The load average before each run is recorded
# (the machine may be shared).
prefill_policies() {
  local lm=models/checkpoints/abc-lm
  local table="$OUT/prefill-policy.md"
  : >"$OUT/prefill-uptime.txt"
  for c in 1 8 32 64; do
    for policy in time tokens; do
      echo "== c=$c --prefill_policy $policy ($(uptime | sed 's/.*load average: //'))"
      echo "c=$c policy=$policy before: $(uptime)" >>"$OUT/prefill-uptime.txt"
      "$BUILD_DIR/loadtest/abcd-loadtest" --launch_server "$BUILD_DIR/server/abcd-server" \
        --server_args "--models $lm --threads 1 --prefill_policy $policy" \
        --tokenizer "$lm/tokenizer.model" --endpoint grpc-generate --concurrency "$c" \
        --duration 12 --prompt_tokens 128 --output_tokens 128 \
        --result_json "$OUT/prefill-$policy-c$c.json" | tee "$OUT/prefill-$policy-c$c.txt"
      echo "c=$c policy=$policy after: $(uptime)" >>"$OUT/prefill-uptime.txt"
    done
  done
  $PY - "$OUT" >"$table" <<'PYEOF'
import json, re, sys
out = sys.argv[1]
load = {}  # (c, policy) -> 1-minute load average before the run
for line in open(f"{out}/prefill-uptime.txt"):
    m = re.match(r"c=(\d+) policy=(\w+) before: .*load average: ([\d.]+)", line)
    if m:
        load[(int(m.group(1)), m.group(2))] = m.group(3)
print("| streams | policy | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | ITL p99/p50 "
      "| out tok/s | mean output tokens | requests | load avg before |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in (1, 8, 32, 64):
    for policy in ("time", "tokens"):
        r = json.load(open(f"{out}/prefill-{policy}-c{c}.json"))
        ratio = r["p99_itl_ms"] / r["median_itl_ms"] if r["median_itl_ms"] > 0 else float("nan")
        mean_out = r["total_output_tokens"] / max(r["completed"], 1)
        print(f"| {c} | {policy} | {r['median_ttft_ms']:.1f} | {r['p99_ttft_ms']:.1f} | "
              f"{r['median_itl_ms']:.2f} | {r['p99_itl_ms']:.2f} | {ratio:.2f}x | "
              f"{r['output_throughput']:.0f} | {mean_out:.1f} | {r['completed']} | "
              f"{load.get((c, policy), '?')} |")
PYEOF
  cat "$table"
}

# Long contexts through the server: the softmax and abc bench models (same size, random weights)
# under prompts of 2k, 8k and 32k tokens (the bundled corpus repeated past its ~12k tokens),
# 128 generated tokens each (HTTP, ignore_eos), 1 stream and 4 streams whose requests arrive
# together (one request per stream). LONG_ROUNDS rounds (default 2), the models alternating
# within each (LONG_CONTEXTS overrides the lengths); the table gives each figure's range over
# the rounds. Softmax at 32k takes about a
# minute per prompt on a 2-core machine, so a round takes about 7 minutes.
long_contexts() {
  local rounds=${LONG_ROUNDS:-2} contexts=${LONG_CONTEXTS:-2048 8192 32768}
  local table="$OUT/long-context.md"
  [[ -d "$MODELS/softmax" && -d "$MODELS/abc" ]] || $PY loadtest/make_bench_models.py --out "$MODELS"
  : >"$OUT/long-context-uptime.txt"
  for round in $(seq 1 "$rounds"); do
    for ctx in $contexts; do
      for c in 1 4; do
        for model in softmax abc; do
          local name="long-$model-$ctx-c$c-r$round"
          echo "== $name ($(uptime | sed 's/.*load average: //'))"
          echo "$name before: $(uptime)" >>"$OUT/long-context-uptime.txt"
          "$BUILD_DIR/loadtest/abcd-loadtest" --launch_server "$BUILD_DIR/server/abcd-server" \
            --server_args "--models $MODELS/$model --max_prompt_tokens 33000" \
            --tokenizer "$MODELS/$model/tokenizer.model" --endpoint http-completions \
            --concurrency "$c" --num_requests "$c" --warmup 0 --prompt_tokens "$ctx" \
            --output_tokens 128 --ignore_eos --result_json "$OUT/$name.json" >"$OUT/$name.txt"
        done
      done
    done
  done
  $PY - "$OUT" "$rounds" $contexts >"$table" <<'PYEOF'
import json, sys
out, rounds, contexts = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3:]]
def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"
print("| context | streams | model | TTFT p50 s | TTFT max s | ITL p50 ms | ITL p99 ms "
      "| out tok/s | attention memory |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for ctx in contexts:
    for c in (1, 4):
        for model in ("softmax", "abc"):
            rs = [json.load(open(f"{out}/long-{model}-{ctx}-c{c}-r{r}.json"))
                  for r in range(1, rounds + 1)]
            assert all(r["completed"] == c and r["failed"] == 0 for r in rs), (model, ctx, c)
            # The gauges are polled every 200 ms and may miss a short run's peak; a bounded
            # state's bytes are known per sequence.
            per_seq = max(r["server"]["state_bytes_per_sequence"].get(model, 0) for r in rs)
            mib = max(max(r["server"]["peak_kv_cache_bytes"] for r in rs), per_seq * c) / 2**20
            print(f"| {ctx} | {c} | {model} | "
                  f"{span([r['median_ttft_ms'] / 1e3 for r in rs], '{:.2f}')} | "
                  f"{span([max(r['ttfts']) for r in rs], '{:.2f}')} | "
                  f"{span([r['median_itl_ms'] for r in rs], '{:.2f}')} | "
                  f"{span([r['p99_itl_ms'] for r in rs], '{:.2f}')} | "
                  f"{span([r['output_throughput'] for r in rs], '{:.0f}')} | {mib:.2f} MiB |")
PYEOF
  cat "$table"
}
if [[ "${1:-all}" == "prefill" ]]; then
  prefill_policies
  exit 0
fi
if [[ "${1:-all}" == "long-context" ]]; then
  long_contexts
  exit 0
fi

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

prefill_policies

if $PY -c 'import matplotlib' 2>/dev/null; then
  $PY loadtest/plot.py "$OUT/bench.json" --out loadtest/plots
else
  echo "(matplotlib missing: apt-get install python3-matplotlib to draw the plots)"
fi
