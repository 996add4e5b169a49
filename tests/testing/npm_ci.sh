#!/usr/bin/env bash
# Installs a test's npm packages into DIR/node_modules from DIR's committed package-lock.json
# (`npm ci`), unless already installed from this exact lockfile, so the test that uses them runs
# offline (and skips where node_modules is missing). Exit status 77 (ctest: skipped) when node or
# npm is not installed.
#   tests/testing/npm_ci.sh DIR LABEL PACKAGE   (PACKAGE: the one whose version is reported)
set -euo pipefail
dir="$1" label="$2" package="$3"
cd "$dir"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "$label npm-ci: node/npm not found; the tests that need $package skip"
  exit 77
fi
stamp=node_modules/.abcd-lock-sha256
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$label npm-ci: node_modules is up to date with package-lock.json"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
echo "$want" > "$stamp"
echo "$label npm-ci: installed $package $(node -p "require('./node_modules/$package/package.json').version")"
