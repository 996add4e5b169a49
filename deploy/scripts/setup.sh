#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root):
#   deploy/scripts/setup.sh run    install dependencies, build, start abcd-server on the bundled models
#   deploy/scripts/setup.sh test   install dependencies, build with -Werror, run every test
#   deploy/scripts/setup.sh build  install dependencies and build only
# Environment: BUILD_DIR (default build), JOBS (default nproc). Extra arguments after `run` go
# to abcd-server (e.g. `setup.sh run --grpc_port 50052`).
set -euo pipefail

cd "$(dirname "$0")/../.."
mode="${1:-run}"
build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"

# Debian packages only; --no-install-recommends keeps python3-torch from pulling a desktop.
build_packages=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  nlohmann-json3-dev libgtest-dev libgmock-dev libsentencepiece-dev libopenblas-dev
  libcpp-httplib-dev prometheus-cpp-dev libboost-dev
)
# The tests also run the PyTorch reference's tests and a clang-format check.
test_packages=(clang-format python3 python3-torch python3-numpy python3-sentencepiece python3-prometheus-client)

install_dependencies() {
  local packages=("${build_packages[@]}") missing=()
  [[ "$mode" == test ]] && packages+=("${test_packages[@]}")
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

build() {
  local werror="${1:-OFF}"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DABCD_WERROR="$werror"
  cmake --build "$build_dir" -j "$jobs"
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
    ;;
  build)
    build OFF
    ;;
  *)
    echo "usage: $0 run|test|build" >&2
    exit 2
    ;;
esac
