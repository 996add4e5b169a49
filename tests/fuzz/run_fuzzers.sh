#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build (-DABCD_FUZZ=ON, see tests/fuzz/README.md) for
# SECONDS each, starting from the committed seeds in tests/fuzz/corpus/<fuzzer>/. New inputs go
# to a scratch folder (the committed corpus is not changed). Any finding (crash, sanitizer
# report, failed check, timeout, out-of-memory) fails the run; its input is kept in
# ARTIFACTS (default <build>/fuzz-artifacts) and the fuzzer's output is printed. FUZZ_JOBS
# fuzzers (default: the CPU count) run at once, each on one core.
#   tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS] [FUZZER...]
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: $0 BUILD_DIR [SECONDS] [FUZZER...]}"
seconds="${2:-20}"
shift $(($# >= 2 ? 2 : $#))
fuzzers=("$@")
if ((${#fuzzers[@]} == 0)); then
  fuzzers=(safetensors_fuzzer model_config_fuzzer http_completion_fuzzer http_translate_fuzzer
           grpc_generate_fuzzer grpc_translate_fuzzer session_blob_fuzzer chat_render_fuzzer)
fi
artifacts="${ARTIFACTS:-$build/fuzz-artifacts}"
mkdir -p "$artifacts"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

jobs_max="${FUZZ_JOBS:-$(nproc)}"

# One fuzzer; writes "ok <runs> <seconds>" or "fail" to $scratch/<fuzzer>.result.
run_one() {
  local fuzzer="$1" binary="$build/tests/fuzz/$1" start=$SECONDS
  if [[ ! -x "$binary" ]]; then
    echo "not-built" >"$scratch/$fuzzer.result"
    return
  fi
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536
                 -print_final_stats=1 -artifact_prefix="$artifacts/$fuzzer-")
  [[ "$fuzzer" == http_* || "$fuzzer" == model_config_* ]] && options+=(-dict="$here/json.dict")
  [[ "$fuzzer" == chat_* ]] && options+=(-dict="$here/chat.dict")
  mkdir -p "$scratch/$fuzzer"
  if "$binary" "${options[@]}" "$scratch/$fuzzer" "$here/corpus/$fuzzer" \
      >"$scratch/$fuzzer.log" 2>&1; then
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$fuzzer.log")
    echo "ok ${runs:-?} $((SECONDS - start))" >"$scratch/$fuzzer.result"
  else
    echo "fail" >"$scratch/$fuzzer.result"
  fi
}

for fuzzer in "${fuzzers[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done
  run_one "$fuzzer" &
done
wait

failed=()
for fuzzer in "${fuzzers[@]}"; do
  read -r result runs took <"$scratch/$fuzzer.result"
  case "$result" in
    ok) echo "fuzz: $fuzzer ok, $runs runs in $took s, no finding" ;;
    not-built)
      echo "fuzz: $build/tests/fuzz/$fuzzer not built" >&2
      failed+=("$fuzzer")
      ;;
    *)
      echo "fuzz: $fuzzer FOUND A PROBLEM (input kept in $artifacts):" >&2
      tail -n 60 "$scratch/$fuzzer.log" >&2
      failed+=("$fuzzer")
      ;;
  esac
done
if ((${#failed[@]})); then
  echo "fuzz: findings or failures in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#fuzzers[@]} fuzzers, ${seconds} s each, no finding"
