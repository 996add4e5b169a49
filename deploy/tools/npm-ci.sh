#!/usr/bin/env bash
# Installs the validators' npm packages into deploy/tools/node_modules from the committed
# package-lock.json (`npm ci`), unless they are already installed from this exact lockfile.
# Everything after this step runs offline. Exit status 77 (ctest: skipped) when node or npm
# is not installed; any npm failure is a failure.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "npm-ci: node/npm not found; the npm-based checks are skipped"
  exit 77
fi
stamp=node_modules/.abcd-lock-sha256
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "npm-ci: node_modules is up to date with package-lock.json"
  exit 0
fi
# kubernetes-models declares node >= 22 but runs on node 20 (what Debian's nodesource/npm
# setups here have); the checks themselves prove it works.
npm ci --no-audit --no-fund --loglevel=error --engine-strict=false
echo "$want" > "$stamp"
echo "npm-ci: installed $(find node_modules -mindepth 1 -maxdepth 1 | wc -l) entries in node_modules"
