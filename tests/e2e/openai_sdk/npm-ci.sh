#!/usr/bin/env bash
# Installs the OpenAI Node SDK into tests/e2e/openai_sdk/node_modules from the committed
# package-lock.json (`npm ci`), unless it is already installed from this exact lockfile; the
# e2e test that runs chat.mjs (tests/e2e/openai_e2e_test.cc) then runs offline, and skips where
# node_modules is missing. Exit status 77 (ctest: skipped) when node or npm is not installed.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "openai_sdk npm-ci: node/npm not found; the OpenAI SDK e2e test is skipped"
  exit 77
fi
stamp=node_modules/.abcd-lock-sha256
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "openai_sdk npm-ci: node_modules is up to date with package-lock.json"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
echo "$want" > "$stamp"
echo "openai_sdk npm-ci: installed openai $(node -p 'require("./node_modules/openai/package.json").version')"
