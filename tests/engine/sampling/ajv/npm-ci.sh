#!/usr/bin/env bash
# Installs ajv and ajv-formats into tests/engine/sampling/ajv/node_modules from the committed
# package-lock.json (`npm ci`), unless already installed from this exact lockfile. The
# json_grammar_test cases JsonSchemaKeywords.Ajv* then run validate.mjs offline, and skip where
# node_modules is missing. Exit status 77 (ctest: skipped) when node or npm is not installed.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "json schema ajv npm-ci: node/npm not found; the ajv cross-checks of json_grammar_test skip"
  exit 77
fi
stamp=node_modules/.abcd-lock-sha256
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "json schema ajv npm-ci: node_modules is up to date with package-lock.json"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
echo "$want" > "$stamp"
echo "json schema ajv npm-ci: installed ajv $(node -p 'require("./node_modules/ajv/package.json").version')"
