#!/usr/bin/env bash
# Installs ajv and ajv-formats into tests/engine/sampling/ajv/node_modules
# (tests/testing/npm_ci.sh); json_grammar_test's JsonSchemaKeywords.Ajv* cases then run
# validate.mjs offline.
exec "$(dirname "$0")/../../../testing/npm_ci.sh" "$(dirname "$0")" "json schema ajv" ajv
