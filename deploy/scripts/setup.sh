#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root):
#   deploy/scripts/setup.sh run    install dependencies, build, start abcd-server on the bundled models
#   deploy/scripts/setup.sh test   install dependencies, build with -Werror, run every test, then
#                                  the sanitizer stage (fuzzers, e2e tests on an ASan/UBSan server)
#   deploy/scripts/setup.sh build  install dependencies and build only
#   deploy/scripts/setup.sh sanitizers  install test dependencies, run only the sanitizer stage
# Environment: BUILD_DIR (default build), JOBS (default nproc), FUZZ_SECONDS (per fuzzer in
# `test`, default 20), SANITIZERS=0 (skip the sanitizer stage). Extra arguments after `run` go
# to abcd-server (e.g. `setup.sh run --grpc_port 50052`).
# `build` and `run` build the whole tree unless told otherwise: TARGETS="abcd-server abcd-client"
# builds only those CMake targets, BUILD_TESTS=OFF configures without the test suites
# (-DABCD_BUILD_TESTS=OFF). The Dockerfile's builder uses both (the shipped binaries only).
# Every build here is a unity build (CMAKE_UNITY_BUILD: 8 sources per compiler run; about 2x
# less compile time on 2 cores); UNITY_BUILD=OFF builds file by file, as a plain cmake does.
set -euo pipefail

cd "$(dirname "$0")/../.."
mode="${1:-run}"
build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
unity="-DCMAKE_UNITY_BUILD=${UNITY_BUILD:-ON}"

# Debian packages only; --no-install-recommends keeps python3-torch from pulling a desktop.
build_packages=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  nlohmann-json3-dev libgtest-dev libgmock-dev libsentencepiece-dev libopenblas-dev
  libcpp-httplib-dev prometheus-cpp-dev libboost-dev
  libhiredis-dev  # the Redis session store (server/sessions)
  libpcre2-dev libutf8proc-dev  # tokenizer.json: Split/Replace regexes, NFC (engine/tokenizer)
)
# The tests also run the PyTorch reference's tests and a clang-format check.
test_packages=(clang-format python3 python3-jinja2 python3-torch python3-numpy python3-sentencepiece python3-prometheus-client
  clang libclang-rt-14-dev  # clang + its sanitizer/libFuzzer runtimes: tests/fuzz
  redis-server)  # the sessions.* tests start a real one on a free loopback port

install_dependencies() {
  local packages=("${build_packages[@]}") missing=()
  [[ "$mode" == test || "$mode" == sanitizers ]] && packages+=("${test_packages[@]}")
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# TARGETS and BUILD_TESTS narrow `build` and `run` (see the header); `test` builds everything.
targets=()
read -r -a targets <<<"${TARGETS:-}"
if [[ -n "${BUILD_TESTS:-}" && "$BUILD_TESTS" != ON && "$BUILD_TESTS" != OFF ]]; then
  echo "setup: BUILD_TESTS must be ON or OFF, got \"$BUILD_TESTS\"" >&2
  exit 2
fi
if [[ "$mode" == test && (${#targets[@]} -gt 0 || "${BUILD_TESTS:-ON}" != ON) ]]; then
  echo "setup: test builds and runs every target: unset TARGETS and BUILD_TESTS" >&2
  exit 2
fi

# `build ON|OFF` (-Werror); without TARGETS or BUILD_TESTS, the whole tree as configured.
build() {
  local werror="${1:-OFF}"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DABCD_WERROR="$werror" "$unity" \
    ${BUILD_TESTS:+-DABCD_BUILD_TESTS="$BUILD_TESTS"}
  cmake --build "$build_dir" -j "$jobs" ${targets[@]+--target "${targets[@]}"}
}

# The sanitizer stage of `test` (README "Sanitizers and fuzzing"): the libFuzzer targets built
# with clang under ASan + UBSan, their seeds replayed and each run for FUZZ_SECONDS; then
# abcd-server, abcd-cli and abcd-client built with -DABCD_ASAN=ON (clang, ASan + UBSan, no
# tests: clang compiles the instrumented code about 4x faster than gcc 12)
# and the main build's e2e tests run against those binaries (ABCD_E2E_SERVER, _CLI, _CLIENT).
# Any sanitizer report from any process fails the stage (reports are written to files).
sanitizer_tests() {
  local fuzz_dir="${build_dir}-fuzz" asan_dir="${build_dir}-asan"
  cmake -S . -B "$fuzz_dir" -G Ninja -DABCD_FUZZ=ON -DABCD_WERROR=ON "$unity" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  cmake --build "$fuzz_dir" -j "$jobs"
  ctest --test-dir "$fuzz_dir" -j "$jobs" --output-on-failure
  tests/fuzz/run_fuzzers.sh "$fuzz_dir" "${FUZZ_SECONDS:-20}"

  cmake -S . -B "$asan_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DABCD_WERROR=ON "$unity" \
    -DABCD_ASAN=ON -DABCD_WITH_CUDA=OFF -DABCD_BUILD_TESTS=OFF \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  cmake --build "$asan_dir" -j "$jobs" --target abcd-server abcd-cli abcd-client
  # The e2e test binaries themselves are the main build's (built here if `test` has not).
  [[ -f "$build_dir/CMakeCache.txt" ]] || cmake -S . -B "$build_dir" -G Ninja "$unity" \
    -DCMAKE_BUILD_TYPE=Release -DABCD_WERROR=ON
  cmake --build "$build_dir" -j "$jobs" --target abcd_e2e_tests
  local reports="$asan_dir/sanitizer-reports" bin
  bin="$(cd "$asan_dir" && pwd)"
  rm -rf "$reports" && mkdir -p "$reports"
  ABCD_E2E_SERVER="$bin/server/abcd-server" ABCD_E2E_CLI="$bin/server/abcd-cli" \
    ABCD_E2E_CLIENT="$bin/server/abcd-client" \
    ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1" \
    UBSAN_OPTIONS="log_path=$reports/ubsan:halt_on_error=1:print_stacktrace=1" \
    ctest --test-dir "$build_dir" -R '^e2e\.' -j "$jobs" --output-on-failure --timeout 600
  if compgen -G "$reports/*" >/dev/null; then
    echo "setup: sanitizer reports from the ASan/UBSan server build:" >&2
    cat "$reports"/* >&2
    return 1
  fi
  echo "setup: sanitizer stage passed (fuzzers, e2e on the ASan/UBSan server)"
}

install_dependencies
case "$mode" in
  run)
    build OFF
    if (($#)); then shift; fi
    exec "$build_dir/server/abcd-server" "$@"
    ;;
  test)
    build ON
    ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure --timeout 600
    [[ "${SANITIZERS:-1}" == 0 ]] || sanitizer_tests
    ;;
  build)
    build OFF
    ;;
  sanitizers)
    sanitizer_tests
    ;;
  *)
    echo "usage: $0 run|test|build|sanitizers" >&2
    exit 2
    ;;
esac
