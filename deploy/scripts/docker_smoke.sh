#!/usr/bin/env bash
# Smoke test of the CPU image on a local Docker engine (slow, not part of CI; deploy/README.md):
#
#   deploy/scripts/docker_smoke.sh
#
# Builds the image (`docker build --network host`), then runs it twice with `--network host`
# (so it also works on an engine started with --bridge=none):
#   1. the default command and ports (gRPC 50051, HTTP 8080): the HEALTHCHECK turns healthy,
#      /readyz answers 200, one completion over HTTP, one translation over gRPC (abcd-client in
#      the container, --port_file), then `docker stop` drains: exit code 0 within the timeout;
#   2. the LM alone on --grpc_port ALT_GRPC_PORT --http_port ALT_HTTP_PORT: the HEALTHCHECK
#      follows the port (healthy), /readyz, one completion, `docker stop` drains.
# Exits 0 when every step passed, else 1 with `docker_smoke: FAILED: STEP` and the container's
# log. Needs docker, curl and the four ports free on the host.
# Environment: IMAGE (default abcd:smoke-cpu), SKIP_BUILD=1 (use IMAGE as it is),
# ALT_GRPC_PORT (50052), ALT_HTTP_PORT (8082), HEALTH_TIMEOUT (seconds to turn healthy, 180),
# STOP_TIMEOUT (docker stop's grace, 45: more than the server's 30 s drain grace).
set -euo pipefail

cd "$(dirname "$0")/../.."
image="${IMAGE:-abcd:smoke-cpu}"
alt_grpc="${ALT_GRPC_PORT:-50052}"
alt_http="${ALT_HTTP_PORT:-8082}"
health_timeout="${HEALTH_TIMEOUT:-180}"
stop_timeout="${STOP_TIMEOUT:-45}"
container=""
step="start"

log() { echo "docker_smoke: $*" >&2; }
fail() {
  log "FAILED: $step${1:+ ($1)}"
  if [[ -n "$container" ]]; then
    log "container log:"
    docker logs "$container" 2>&1 | tail -n 40 >&2 || true
  fi
  exit 1
}
cleanup() {
  if [[ -n "$container" ]]; then docker rm -f "$container" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# Something already answering on 127.0.0.1:PORT?
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Starts the image (extra arguments replace its CMD) and waits until Docker reports the
# HEALTHCHECK healthy.
start() {
  step="$1: docker run"
  shift
  local name="abcd-smoke-$$-${RANDOM}"
  docker run -d --name "$name" --network host --stop-timeout "$stop_timeout" "$image" "$@" \
    >/dev/null || fail
  container="$name"
  step="${step%: *}: health status healthy within ${health_timeout} s"
  local status="" started=$SECONDS deadline=$((SECONDS + health_timeout))
  while ((SECONDS < deadline)); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$container") || fail
    [[ "$status" == healthy ]] && break
    [[ "$(docker inspect -f '{{.State.Running}}' "$container")" == true ]] || fail "exited"
    sleep 2
  done
  [[ "$status" == healthy ]] || fail "last status: $status"
  log "${step%%:*}: healthy after $((SECONDS - started)) s"
}

# HTTP on the host: `http PORT PATH [BODY]` prints the body; fails the step unless 200 (in a
# command substitution its exit status carries the failure: `x=$(http ...) || exit 1`).
http() {
  local port="$1" path="$2" body="${3:-}" out code
  out=$(mktemp)
  if [[ -n "$body" ]]; then
    code=$(curl -s -o "$out" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' \
      -d "$body" "http://127.0.0.1:$port$path") || code="curl error $?"
  else
    code=$(curl -s -o "$out" -w '%{http_code}' --max-time 60 "http://127.0.0.1:$port$path") ||
      code="curl error $?"
  fi
  local text
  text=$(cat "$out")
  rm -f "$out"
  [[ "$code" == 200 ]] || fail "HTTP $code: $text"
  printf '%s' "$text"
}

probes_and_completion() {
  local name="$1" http_port="$2" body
  step="$name: /readyz"
  http "$http_port" /readyz >/dev/null || exit 1
  step="$name: POST /v1/completions"
  body=$(http "$http_port" /v1/completions \
    '{"model": "abc-lm", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}') ||
    exit 1
  [[ "$body" == *'"text_completion"'* && "$body" == *'"completion_tokens":8'* ]] ||
    fail "unexpected answer: $body"
  log "$step: ${body:0:160}"
}

# `docker stop` sends SIGTERM: the server drains and must exit 0 before the stop timeout.
stop_drains() {
  step="$1: docker stop drains (exit code 0 within ${stop_timeout} s)"
  local started=$SECONDS code
  docker stop -t "$stop_timeout" "$container" >/dev/null || fail
  code=$(docker inspect -f '{{.State.ExitCode}}' "$container") || fail
  ((SECONDS - started < stop_timeout)) || fail "took $((SECONDS - started)) s"
  [[ "$code" == 0 ]] || fail "exit code $code"
  docker logs "$container" 2>&1 | grep -q 'event=draining' || fail "no event=draining in the log"
  log "$1: stopped in $((SECONDS - started)) s, exit code 0"
  docker rm "$container" >/dev/null
  container=""
}

step="tools"
command -v docker >/dev/null || fail "docker not found"
command -v curl >/dev/null || fail "curl not found"
docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"
step="host ports free"
for port in 50051 8080 "$alt_grpc" "$alt_http"; do
  if port_busy "$port"; then fail "127.0.0.1:$port is in use"; fi
done

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  step="docker build"
  started=$SECONDS
  DOCKER_BUILDKIT=1 docker build --network host -t "$image" . || fail
  log "docker build: $((SECONDS - started)) s"
fi

start "default ports"
probes_and_completion "default ports" 8080
step="default ports: translation (abcd-client translate --port_file in the container)"
translation=$(docker exec "$container" abcd-client translate --port_file /tmp/abcd-ports.json \
  --text "Open file" --beam_size 4) || fail
[[ -n "$translation" ]] || fail "empty translation"
log "default ports: translation of \"Open file\": $translation"
stop_drains "default ports"

start "ports $alt_grpc/$alt_http" --models /opt/abcd/models/abc-lm \
  --grpc_port "$alt_grpc" --http_port "$alt_http"
step="ports $alt_grpc/$alt_http: nothing on the default gRPC port"
if port_busy 50051; then fail "127.0.0.1:50051 answers"; fi
probes_and_completion "ports $alt_grpc/$alt_http" "$alt_http"
stop_drains "ports $alt_grpc/$alt_http"

log "passed: image $image healthy on default and moved ports, completion, translation, drain"
