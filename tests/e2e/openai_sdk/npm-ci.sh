#!/usr/bin/env bash
# Installs the OpenAI Node SDK into tests/e2e/openai_sdk/node_modules (tests/testing/npm_ci.sh);
# the e2e test that runs chat.mjs (tests/e2e/openai_e2e_test.cc) then runs offline.
exec "$(dirname "$0")/../../testing/npm_ci.sh" "$(dirname "$0")" openai_sdk openai
