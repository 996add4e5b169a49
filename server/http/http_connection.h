// Internal to HttpServer (http_server.cc): one HTTP/1.1 connection (Session), the Exchange it
// hands the application, and what the listener and every connection share. The listener
// (HttpServer::Impl) accepts, evicts and stops; a Session reads, parses, enforces the per-request
// limits and deadlines of http_server.h, and writes the answers in order.
//
// Thread-safety: every Session member function runs on the connection's strand, except the
// atomics the acceptor reads (idle_since, header_since, Claim). Shared's counters are atomic, its
// session map is guarded by its mutex. ExchangeImpl: see Exchange in http_server.h.
#pragma once

// clang-format off
#include <utility>  // before Boost.Asio: its awaitable.hpp uses std::exchange without it
// clang-format on

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/time/time.h"
#include "server/core/body_budget.h"
#include "server/http/http_server.h"

namespace abcd::http::internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Executor = net::any_io_executor;

constexpr size_t kReadChunk = 8192;

// Lets threads other than the I/O threads post to a strand only while the io_context lives.
class PostGate {
 public:
  void Post(const Executor& executor, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_) net::post(executor, std::move(fn));
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  bool open_ = true;
};

class Session;

// What the listener and every connection share; outlives them all.
struct Shared {
  Shared(ServerLimits l, RequestHandler h, RefusalHook r)
      : limits(l), handler(std::move(h)), on_refused(std::move(r)) {}

  const ServerLimits limits;
  const RequestHandler handler;
  const RefusalHook on_refused;
  const std::shared_ptr<PostGate> gate = std::make_shared<PostGate>();
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};
  std::atomic<int> refused{0};
  std::atomic<int64_t> evicted{0};
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // guarded by mu
};

class ExchangeImpl;

// One connection. Every member function runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared, bool refused)
      : socket_(std::move(socket)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        shared_(shared),
        refused_(refused) {
    (refused_ ? shared_.refused : shared_.connections).fetch_add(1);
  }
  ~Session();

  Executor executor() { return socket_.get_executor(); }
  // Steady-clock nanoseconds since when the connection has been idle (no request in flight, no
  // byte of the next one), 0 while it is not. Read by the acceptor to pick whom to evict.
  int64_t idle_since() const { return idle_since_.load(std::memory_order_relaxed); }
  // Likewise since when its request header has been incomplete (its first byte), 0 while it is
  // not reading a header: the acceptor evicts the oldest of these when none is idle.
  int64_t header_since() const { return header_since_.load(std::memory_order_relaxed); }
  // Claims the connection for eviction (false when it is no longer idle, or its header no longer
  // the incomplete one seen, or it was already claimed).
  bool Claim(bool header, int64_t seen) {
    return (header ? header_since_ : idle_since_).compare_exchange_strong(seen, -1);
  }
  void Begin();
  // Runs on the strand after Claim: closes the connection unless a request has begun since
  // (idle) or the claimed header has completed (header).
  void Evict(bool header);
  void OnStop();
  void ForceClose();

  // ExchangeImpl's operations; ignored unless `exchange` is the current one.
  void Reply(ExchangeImpl* exchange, ServerResponse response);
  void StartStream(ExchangeImpl* exchange, ServerResponse head);
  void StreamChunk(ExchangeImpl* exchange, std::string data);
  void EndStream(ExchangeImpl* exchange);

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kDraining, kLingering, kClosed };

  bool Current(ExchangeImpl* exchange) const;
  void MaybeRead();
  void OnRead(beast::error_code ec, size_t n);
  void Parse();
  bool ScanLines();
  void StartHandling();
  void Fail(int status, std::string message);
  void Queue(std::string bytes);
  void WriteNext();
  void OnWrite(beast::error_code ec);
  void FinishExchange();
  void Linger();
  void Close();
  void ClientGone();
  void AbortExchange(Abort kind);
  void ArmRead(absl::Duration timeout);
  void DisarmRead();
  void OnReadDeadline();
  void SetIdle(bool idle);

  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  Shared& shared_;
  const bool refused_;
  Phase phase_ = Phase::kIdle;
  beast::flat_buffer buffer_;  // received, not yet parsed
  std::array<char, kReadChunk> scratch_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  // Line scan of the header being read: position in buffer_, current line's length, lines seen.
  size_t scan_pos_ = 0;
  size_t line_bytes_ = 0;
  int lines_ = 0;
  bool header_end_seen_ = false;
  bool reading_ = false;
  bool writing_ = false;
  std::deque<std::string> out_;
  std::string in_flight_;
  uint64_t read_generation_ = 0;
  uint64_t write_generation_ = 0;
  std::shared_ptr<ExchangeImpl> exchange_;
  bool answered_ = false;  // the current exchange's response is complete (queued)
  bool streaming_ = false;
  bool http10_ = false;
  bool close_after_ = false;
  bool stopping_ = false;
  bool first_request_ = true;
  size_t discarded_ = 0;            // bytes read and dropped while draining or lingering
  BodyBudget::Charge body_charge_;  // the current request's body, charged at its header
  std::atomic<int64_t> idle_since_{0};
  std::atomic<int64_t> header_since_{0};
};

}  // namespace abcd::http::internal
