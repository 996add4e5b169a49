// The HTTP/JSON frontend (DESIGN.md section 6), default port 8080:
//
//   POST /v1/completions  OpenAI-compatible completions; "stream": true -> server-sent events
//   POST /v1/translate    {"text": ...} -> {"translation": ...};
//                         {"texts": [...]} -> {"translations": [...]}
//   GET  /v1/models       OpenAI-style model list (+ kind, state_bytes_per_sequence)
//   GET  /v1/models/NAME  one model object
//   GET  /healthz         200 while the process is up
//   GET  /readyz          200 when models.ready(), else 503 (loading, draining or failed)
//   GET  /metrics         hooks.render_metrics(), Prometheus text format 0.0.4
//
// Bodies are validated at the door (request_parser.h); errors are
// {"error": {"message", "type", "param", "code"}} with the status from MapStatusCode
// (http_errors.h). Each request waits on its own EventChannel fed by the executor's callback,
// so the engine thread never blocks on a client; a streaming client that disconnects has its
// request cancelled at once (a non-streaming one is only noticed when its answer is written:
// httplib 0.11 gives handlers no view of the socket). /healthz, /readyz and /metrics never
// touch an executor. Request bodies need a Content-Length (chunked ones get 411: httplib
// enforces max_body_bytes on Content-Length bodies only).
//
// Connections are served by a pool that keeps `thread_count` threads and grows to
// `max_threads` (a streaming request holds its thread), so probes are not starved by streams.
// SIGPIPE is blocked on the server's threads (writes to a closed client fail with EPIPE).
//
// Thread-safety: Start and Stop from one controlling thread; `models` and the hooks must
// outlive the service, and the hooks must be callable from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/core/served_models.h"

namespace abcd::http {

struct HttpHooks {
  // The Prometheus text for GET /metrics; null serves an empty body.
  std::function<std::string()> render_metrics;
  // Called once per request to /v1/completions ("completions"), /v1/translate ("translate") and
  // /v1/models ("list_models") with the outcome: "ok", "invalid_argument",
  // "resource_exhausted", "cancelled", "deadline_exceeded", "unavailable", "not_found",
  // "internal". May be null.
  std::function<void(absl::string_view kind, absl::string_view status)> count_request;
};

struct HttpOptions {
  size_t max_body_bytes = size_t{1} << 20;  // larger bodies -> 413
  int max_batch_texts = 64;                 // len(texts) limit of /v1/translate
  int thread_count = 8;                     // connection threads started up front
  int max_threads = 256;                    // the pool grows to this many on demand
  int max_tokens_limit = 4096;              // keep equal to ExecutorOptions::max_new_tokens
};

class HttpService {
 public:
  HttpService(ServedModels& models, HttpHooks hooks, HttpOptions options);
  ~HttpService();  // Stop()s
  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;

  // Binds host:port (port 0: an ephemeral port, see port()) and serves on its own threads.
  // UNAVAILABLE when the address cannot be bound; FAILED_PRECONDITION when already started.
  absl::Status Start(const std::string& host, int port);
  // The bound port after a successful Start, else -1.
  int port() const { return port_; }
  // Stops accepting, ends in-flight requests (their executor requests are cancelled; waiting
  // clients get 503) and joins every server thread. Idempotent.
  void Stop();

 private:
  class Impl;  // routes, handlers and the httplib server
  std::unique_ptr<Impl> impl_;
  std::thread listener_;
  int port_ = -1;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace abcd::http
