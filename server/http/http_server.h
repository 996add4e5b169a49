// The HTTP/1.1 transport under HttpService: an event-driven server on Boost.Beast/Asio.
//
// A fixed number of I/O threads (`io_threads`) run every connection; nothing blocks them: a
// request the application answers later (an executor's events) holds only its Exchange, and
// the application wakes the connection with Exchange::Dispatch. Limits are enforced while
// reading, so memory never grows with what a client sends:
//   - the request line (414) and each header line (431) are at most `max_line_bytes`, the
//     whole header at most `max_header_bytes` (431); a bad or negative Content-Length, or any
//     other malformed header, is 400 at once; a body over `max_body_bytes` is 413 as soon as
//     its Content-Length is read (`large_body_bytes` for `large_body_path`); chunked request
//     bodies are 411; each refusal closes;
//   - the header must arrive within `header_timeout` of its first byte (of the connection's
//     start for the first request), the body within `body_timeout` of the header, the next
//     keep-alive request within `idle_timeout`; a response write not finished within
//     `write_timeout` ends the connection. Slow clients are closed at their deadline;
//   - at `max_connections` open connections, a new one makes room by closing the connection
//     idle longest (no request in flight, no byte of the next one received: a keep-alive
//     connection between requests or a fresh one that has sent nothing), else the one whose
//     incomplete request header began first (so clients that drip partial headers cannot keep
//     new ones out); only when every connection has a complete header (a body being received
//     or a request in flight) does the new one get 503 and close. Above 3/4 of the cap a
//     keep-alive connection waits at most `pressure_idle_timeout` for its next request;
//   - with a `body_budget`, a body is charged its Content-Length as soon as its header is read
//     (before any byte of it is buffered) and released when its exchange ends; a body that
//     does not fit gets 503 + Retry-After and the connection closes (body_budget.h).
// Requests on one connection are answered in order (pipelined bytes wait in a bounded buffer
// until the response before them is written). A connection that closes while its request is
// being handled aborts the exchange at once (Abort::kClientGone).
//
// The listening socket binds exclusively (SO_REUSEADDR, no SO_REUSEPORT: a second server on the
// port fails with "Address already in use") with a `listen_backlog` for bursts.
//
// Thread-safety: Start and Stop from one controlling thread. The handler runs on a connection's
// strand; see Exchange for the rest.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/body_budget.h"

namespace abcd::http {

struct ServerLimits {
  int io_threads = 2;
  int max_connections = 1024;
  int listen_backlog = 4096;
  size_t max_line_bytes = size_t{8} << 10;
  size_t max_header_bytes = size_t{64} << 10;
  size_t max_body_bytes = size_t{1} << 20;
  // Requests to exactly `large_body_path` (e.g. "/v1/sessions") may have bodies up to
  // `large_body_bytes` when that is larger (413 beyond, as soon as the Content-Length is read).
  std::string large_body_path;
  size_t large_body_bytes = 0;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration write_timeout = absl::Seconds(30);
  absl::Duration pressure_idle_timeout = absl::Seconds(5);
  // Stop(): how long connections get to write their last bytes before they are cut.
  absl::Duration stop_timeout = absl::Milliseconds(500);
  // Request bodies in flight, shared with other listeners and gRPC (not owned; null: none).
  BodyBudget* body_budget = nullptr;
};

struct ServerRequest {
  std::string method;
  std::string path;  // the target without its query string
  std::string body;
};

struct ServerResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this response
};

enum class Abort {
  kClientGone,      // the connection closed, failed or timed out; nothing more can be written
  kServerStopping,  // Stop(): answer now (Reply or EndStream); the connection closes after it
};

// One request's answer. Reply, StartStream, StreamChunk, EndStream and OnAbort run on the
// connection's strand only (inside the handler, a Dispatch'ed function or the abort handler);
// after the connection is gone they do nothing. Dispatch may be called from any thread at any
// time: `fn` runs on the strand while the connection lives, else never (it is destroyed).
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual void Reply(ServerResponse response) = 0;
  // A chunked response (`head`'s body is ignored); then StreamChunk any number of times and
  // EndStream once.
  virtual void StartStream(ServerResponse head) = 0;
  virtual void StreamChunk(std::string data) = 0;
  virtual void EndStream() = 0;
  // Called at most once, on the strand, if the exchange ends before it was answered in full.
  // Cleared once the response is complete. The handler may hold references: they are dropped
  // when the exchange settles.
  virtual void OnAbort(std::function<void(Abort)> handler) = 0;
  virtual void Dispatch(std::function<void()> fn) = 0;
};

using RequestHandler =
    std::function<void(ServerRequest request, std::shared_ptr<Exchange> exchange)>;

// Called on a connection's strand whenever the transport answers by itself and closes: a
// connection over the cap with none idle to close, or a body over the body budget (503), an
// over-long request line or header (414, 431), a malformed
// request (400), a header or body that came too late (408), a body too large (413) or chunked
// (411). `target` is the request's target when its header was read, else empty.
using RefusalHook = std::function<void(absl::string_view target, int status)>;

class HttpServer {
 public:
  HttpServer(ServerLimits limits, RequestHandler handler, RefusalHook on_refused);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (0: ephemeral) and starts the I/O threads. UNAVAILABLE naming the address
  // and the reason when it cannot bind.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // Closes the listener, aborts every exchange with kServerStopping, gives connections up to
  // `stop_timeout` to write their last bytes, then closes them and joins the I/O threads.
  // Abort handlers of exchanges still unanswered then run (kClientGone) on this thread.
  void Stop();
  // Open connections (refused ones not included).
  int connections() const;
  // Idle and partial-header connections closed to make room for new ones at max_connections
  // (cumulative).
  int64_t evicted() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = -1;
};

}  // namespace abcd::http
