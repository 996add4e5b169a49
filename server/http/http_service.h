// The HTTP/JSON frontend (API in server/README.md), default port 8080:
//
//   POST /v1/completions  OpenAI-compatible completions; "stream": true -> server-sent events;
//                         "n" choices, "session_id" ("new" or an id), "prompt" as token ids,
//                         "logprobs", "echo", "stream_options" (completion_format.h shapes;
//                         abcd's own fields under a choice's "abcd" object)
//   GET|DELETE /v1/sessions/ID   a session's metadata JSON / delete it
//   GET  /v1/sessions/ID/state   the session's blob (application/octet-stream)
//   POST /v1/sessions     a blob (body up to SessionOps::max_session_bytes) -> a new session
//   POST /v1/translate    {"text": ...} -> {"translation": ...};
//                         {"texts": [...]} -> {"translations": [...]}
//   GET  /v1/models       OpenAI-style model list (+ kind, state_bytes_per_sequence)
//   GET  /v1/models/NAME  one model object
//   POST /tokenize, /detokenize   vLLM's shapes (tokenize_route.h)
//   GET  /healthz         200 while the process is up         } admin_service.h; also on
//   GET  /readyz          200 when models.ready(), else 503   } the admin listener
//   GET  /metrics         hooks.render_metrics(), Prometheus  } (--admin_port)
//
// Bodies are validated at the door (request_parser.h); errors are
// {"error": {"message", "type", "param", "code"}} with the status from MapStatusCode
// (http_errors.h). The transport is HttpServer (http_server.h: Boost.Beast on a fixed number of
// I/O threads, limits enforced while reading, deadlines, a connection cap that evicts the
// idlest connection, the process-wide body budget). No I/O thread ever
// waits on an executor: each request's EventChannel wakes its connection when events arrive.
// /healthz, /readyz and /metrics never touch an executor, so they answer at once whatever the
// load. At most `max_inflight` completions and translations are answered at once; beyond that
// a request gets 429 (counted as "resource_exhausted") before any work is done. A client that
// disconnects while its request runs (streaming or not) has its executor request cancelled at
// once. Chat completions and /tokenize are prepared (parsed, chat template rendered, tokenized)
// on a RenderQueue (render_queue.h) of max(1, thread_count / 2) workers owned by the service,
// never on an I/O thread; the render stops when the client disconnects or Stop() runs. Session
// store calls (opening a completion's session, saving it at the end, the
// /v1/sessions routes) run on the I/O threads: the store fails fast in an outage (its breaker),
// and a commit that fails is the answer's error (SSE: an error event before [DONE]). On Stop, an
// unfinished SSE stream ends with an error event and `data: [DONE]`; a
// waiting non-streaming request gets 503. Request bodies need a Content-Length (chunked ones get
// 411).
//
// Thread-safety: Start and Stop from one controlling thread; `models` and the hooks must
// outlive the service, and the hooks must be callable from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/body_budget.h"
#include "server/core/served_models.h"
#include "server/core/session_ops.h"

namespace abcd::http {

struct HttpHooks {
  // The Prometheus text for GET /metrics; null serves an empty body.
  std::function<std::string()> render_metrics;
  // Called once per request to /v1/completions ("completions"), /v1/translate ("translate"),
  // /v1/models ("list_models"), /v1/sessions ("sessions") and /tokenize, /detokenize
  // ("tokenize"; ServerMetrics counts it as "other") with the outcome: "ok",
  // "invalid_argument", "resource_exhausted", "cancelled", "deadline_exceeded", "unavailable",
  // "not_found", "aborted", "failed_precondition", "internal". May be null.
  std::function<void(absl::string_view kind, absl::string_view status)> count_request;
};

struct HttpOptions {
  size_t max_body_bytes = size_t{1} << 20;  // larger bodies -> 413
  int max_batch_texts = 64;                 // len(texts) limit of /v1/translate
  int thread_count = 2;                     // I/O threads serving every connection
  int max_connections = 1024;               // beyond it a new connection gets 503 + close
  int max_inflight = 256;                   // completions + translations at once; beyond: 429
  int max_tokens_limit = 4096;              // keep equal to ExecutorOptions::max_new_tokens
  int max_choices = 16;                     // n; keep equal to ExecutorOptions::max_choices
  int max_prompt_tokens = 4096;             // longest token-id prompt read
  // Sessions (null: a request naming one is 503). POST /v1/sessions bodies may be up to its
  // max_session_bytes.
  const SessionOps* sessions = nullptr;
  size_t max_line_bytes = size_t{8} << 10;            // request line (414) / header line (431)
  size_t max_header_bytes = size_t{64} << 10;         // whole header (431)
  absl::Duration header_timeout = absl::Seconds(10);  // first byte -> end of header
  absl::Duration body_timeout = absl::Seconds(30);    // end of header -> end of body
  absl::Duration idle_timeout = absl::Seconds(60);    // keep-alive wait for the next request
  absl::Duration write_timeout = absl::Seconds(30);   // a response write not finished
  // Request bodies in flight, process-wide (not owned; null: unlimited). http_server.h.
  BodyBudget* body_budget = nullptr;
};

class HttpService {
 public:
  HttpService(ServedModels& models, HttpHooks hooks, HttpOptions options);
  ~HttpService();  // Stop()s
  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;

  // Binds host:port exclusively (port 0: an ephemeral port, see port()) and serves on its own
  // I/O threads. UNAVAILABLE naming the address and the reason ("Address already in use") when
  // it cannot bind; FAILED_PRECONDITION when already started.
  absl::Status Start(const std::string& host, int port);
  // The bound port after a successful Start, else -1.
  int port() const { return port_; }
  // Idle connections closed to make room at max_connections (cumulative; http_server.h).
  int64_t evicted_connections() const;
  // Stops accepting, ends in-flight requests (their executor requests are cancelled; waiting
  // clients get 503, streams an error event and [DONE]), closes every connection within about
  // half a second and joins the I/O threads. Idempotent.
  void Stop();

 private:
  class Impl;  // routes and handlers over an HttpServer
  std::unique_ptr<Impl> impl_;
  int port_ = -1;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace abcd::http
