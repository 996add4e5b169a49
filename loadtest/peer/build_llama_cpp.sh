#!/bin/bash
# Fetch and build llama.cpp at a pinned commit (CPU only, GGML_NATIVE) for the side-by-side
# harness (loadtest/peer/README.md). Not part of CI.
#
#   LLAMA_CPP_REPO    git URL or local mirror (a git dir or a clone); default the GitHub URL
#   LLAMA_CPP_COMMIT  the commit to build (default below; the harness records it in its table)
#   PEER_DIR          where the checkout and build go (default /tmp/abcd-peer)
#   JOBS              build parallelism (default 2); the build runs under `nice -n 19`
# Prints the build directory's bin/ on success. Idempotent: an existing build at the commit is
# reused.
set -euo pipefail
REPO=${LLAMA_CPP_REPO:-https://github.com/ggml-org/llama.cpp}
COMMIT=${LLAMA_CPP_COMMIT:-1eeb523c3e0c7ffbd59469f5463dcbdecba3535e}
PEER_DIR=${PEER_DIR:-/tmp/abcd-peer}
JOBS=${JOBS:-2}
SRC=$PEER_DIR/llama.cpp
GIT=$PEER_DIR/llama.cpp.git
mkdir -p "$PEER_DIR"
[[ -d $GIT ]] || git clone --quiet --bare "$REPO" "$GIT"
if ! git --git-dir="$GIT" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
  git --git-dir="$GIT" fetch --quiet origin "$COMMIT" ||
    { echo "commit $COMMIT is not in $REPO" >&2; exit 1; }
fi
COMMIT=$(git --git-dir="$GIT" rev-parse "$COMMIT^{commit}")
if [[ $(cat "$SRC/.abcd-commit" 2>/dev/null || true) != "$COMMIT" ]]; then
  # A plain export of the tree, without the vocab test files (models/*.gguf: not needed, and a
  # snapshot mirror may lack their blobs).
  rm -rf "$SRC" && mkdir -p "$SRC"
  git --git-dir="$GIT" --work-tree="$SRC" -c core.sparseCheckout=false \
    checkout --quiet "$COMMIT" -- . ':(exclude)models/*.gguf'
  echo "$COMMIT" >"$SRC/.abcd-commit"
fi
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF >"$PEER_DIR/cmake.log" 2>&1 ||
  { tail -20 "$PEER_DIR/cmake.log" >&2; exit 1; }
nice -n 19 cmake --build "$SRC/build" -j"$JOBS" --target llama-bench llama-batched-bench \
  llama-server llama-simple llama-tokenize >"$PEER_DIR/build.log" 2>&1 ||
  { tail -30 "$PEER_DIR/build.log" >&2; exit 1; }
echo "$SRC/build/bin"
