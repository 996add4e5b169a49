#include "server/http/http_connection.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/http/http_errors.h"
#include "server/http/http_wire.h"

namespace abcd::http::internal {
namespace {

// How long a connection that was answered with an error (or is being closed) keeps reading
// and discarding, so the client sees the answer instead of a reset.
constexpr auto kLinger = std::chrono::seconds(1);
// The most a refused or closing connection's client may send before it is closed at once
// (within kLinger). Discarded bytes are read into the fixed scratch buffer, never kept, so this
// costs no memory; it is large enough that a client sending a body a few times over the limit
// reads its 413 instead of a reset (and an EPIPE, which kills clients that do not ignore SIGPIPE).
constexpr size_t kMaxDiscard = size_t{4} << 20;

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::weak_ptr<Session> session, Executor executor, std::shared_ptr<PostGate> gate)
      : session_(std::move(session)), executor_(std::move(executor)), gate_(std::move(gate)) {}

  void Reply(ServerResponse response) override {
    if (auto s = session_.lock()) s->Reply(this, std::move(response));
  }
  void StartStream(ServerResponse head) override {
    if (auto s = session_.lock()) s->StartStream(this, std::move(head));
  }
  void StreamChunk(std::string data) override {
    if (auto s = session_.lock()) s->StreamChunk(this, std::move(data));
  }
  void EndStream() override {
    if (auto s = session_.lock()) s->EndStream(this);
  }
  void OnAbort(std::function<void(abcd::http::Abort)> handler) override {
    abort_ = std::move(handler);
  }
  void Dispatch(std::function<void()> fn) override {
    gate_->Post(executor_, [session = session_, fn = std::move(fn)] {
      if (session.lock() != nullptr) fn();
    });
  }

  // The abort handler, removed (it runs at most once).
  std::function<void(abcd::http::Abort)> TakeAbort() { return std::exchange(abort_, nullptr); }
  // Drops the abort handler later on the strand, so that what it holds is not destroyed while
  // one of its own functions is running.
  void ReleaseAbort() {
    if (abort_ == nullptr) return;
    net::post(executor_, [handler = TakeAbort()] {});
  }

 private:
  const std::weak_ptr<Session> session_;
  const Executor executor_;
  const std::shared_ptr<PostGate> gate_;
  std::function<void(abcd::http::Abort)> abort_;
};

Session::~Session() {
  // The connection is gone with its exchange unanswered (only when the server stops).
  if (exchange_ != nullptr) {
    if (auto handler = exchange_->TakeAbort()) handler(Abort::kClientGone);
  }
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.sessions.erase(this);
  }
  (refused_ ? shared_.refused : shared_.connections).fetch_sub(1);
}

void Session::Begin() {
  if (shared_.stopping.load()) return Close();
  if (refused_) {
    return Fail(503, absl::StrCat("too many connections (limit ", shared_.limits.max_connections,
                                  "); retry later"));
  }
  ArmRead(shared_.limits.header_timeout);  // the first request's header is due from now
  SetIdle(true);
  MaybeRead();
}

void Session::SetIdle(bool idle) {
  if (!idle) return idle_since_.store(0);
  int64_t current = idle_since_.load();
  // A claimed connection (-1) stays claimed: Evict decides on the strand.
  if (current == 0) idle_since_.compare_exchange_strong(current, SteadyNanos());
}

void Session::Evict(bool header) {
  if (header && (phase_ != Phase::kHeader || header_since_.load() != -1)) return;  // completed
  if (!header && (phase_ != Phase::kIdle || buffer_.size() > 0)) {
    idle_since_.store(0);  // a request began meanwhile: it stays
    return;
  }
  shared_.evicted.fetch_add(1);
  Close();
}

void Session::OnStop() {
  stopping_ = true;
  close_after_ = true;
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kHeader:
    case Phase::kBody:
      return Close();
    case Phase::kHandling:
      if (!answered_) AbortExchange(Abort::kServerStopping);
      return;
    default:
      return;
  }
}

void Session::ForceClose() {
  if (phase_ == Phase::kHandling && !answered_) AbortExchange(Abort::kClientGone);
  Close();
}

bool Session::Current(ExchangeImpl* exchange) const {
  return exchange == exchange_.get() && phase_ == Phase::kHandling && !answered_;
}

void Session::Reply(ExchangeImpl* exchange, ServerResponse response) {
  if (!Current(exchange) || streaming_) return;
  answered_ = true;
  close_after_ = close_after_ || response.close;
  Queue(wire::Head(response, http10_, close_after_, wire::Framing::kLength) + response.body);
  exchange->ReleaseAbort();
}

void Session::StartStream(ExchangeImpl* exchange, ServerResponse head) {
  if (!Current(exchange) || streaming_) return;
  streaming_ = true;
  if (http10_) close_after_ = true;  // no chunked encoding: the close ends the body
  head.body.clear();
  Queue(wire::Head(head, http10_, close_after_,
                   http10_ ? wire::Framing::kClose : wire::Framing::kChunked));
}

void Session::StreamChunk(ExchangeImpl* exchange, std::string data) {
  if (!Current(exchange) || !streaming_ || data.empty()) return;
  if (http10_) return Queue(std::move(data));
  Queue(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
}

void Session::EndStream(ExchangeImpl* exchange) {
  if (!Current(exchange) || !streaming_) return;
  answered_ = true;
  if (!http10_) Queue("0\r\n\r\n");
  exchange->ReleaseAbort();
  if (out_.empty() && !writing_) FinishExchange();
}

void Session::MaybeRead() {
  if (reading_ || phase_ == Phase::kClosed) return;
  // While a request is handled, pipelined bytes wait; past one header's worth, reading pauses.
  if (phase_ == Phase::kHandling && buffer_.size() >= shared_.limits.max_header_bytes) return;
  reading_ = true;
  // Into a scratch array, not buffer_: Parse may consume (and so move) buffer_ while this read
  // is pending.
  socket_.async_read_some(
      net::buffer(scratch_),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnRead(ec, n); });
}

void Session::OnRead(beast::error_code ec, size_t n) {
  reading_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    if (phase_ == Phase::kDraining && writing_) return;  // let the answer go out if it can
    return ClientGone();
  }
  if (phase_ == Phase::kLingering || phase_ == Phase::kDraining) {
    // Discarded; a client that keeps sending this much after its answer is cut off now.
    discarded_ += n;
    if (discarded_ > kMaxDiscard) return Close();
    return MaybeRead();
  }
  net::buffer_copy(buffer_.prepare(n), net::buffer(scratch_.data(), n));
  buffer_.commit(n);
  if (phase_ != Phase::kHandling) Parse();
  MaybeRead();
}

// Checks the header lines in buffer_ as they arrive, up to the header's end: a line longer
// than max_line_bytes is refused without waiting for its end.
bool Session::ScanLines() {
  const char* data = static_cast<const char*>(buffer_.data().data());
  const size_t size = buffer_.size();
  const size_t limit = shared_.limits.max_line_bytes;
  for (; scan_pos_ < size && !header_end_seen_; ++scan_pos_) {
    const char c = data[scan_pos_];
    if (c == '\n') {
      if (line_bytes_ == 0 && lines_ > 0) header_end_seen_ = true;
      ++lines_;
      line_bytes_ = 0;
    } else if (c != '\r' && ++line_bytes_ > limit) {
      if (lines_ == 0) {
        Fail(414, absl::StrCat("request line exceeds ", limit, " bytes"));
      } else {
        Fail(431, absl::StrCat("request header line exceeds ", limit, " bytes"));
      }
      return false;
    }
  }
  return true;
}

void Session::Parse() {
  const ServerLimits& limits = shared_.limits;
  for (;;) {
    if (phase_ == Phase::kIdle) {
      if (buffer_.size() == 0) return;
      SetIdle(false);
      phase_ = Phase::kHeader;
      header_since_.store(SteadyNanos());
      parser_.emplace();
      parser_->header_limit(static_cast<uint32_t>(limits.max_header_bytes));
      // The largest limit of any path; the request's own is checked once its target is known.
      parser_->body_limit(
          static_cast<uint64_t>(std::max(limits.max_body_bytes, limits.large_body_bytes)));
      scan_pos_ = 0;
      line_bytes_ = 0;
      lines_ = 0;
      header_end_seen_ = false;
      // The first request's header is due header_timeout after the connection opened.
      if (!first_request_) ArmRead(limits.header_timeout);
    }
    if (phase_ == Phase::kHeader) {
      if (!ScanLines()) return;
      beast::error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      scan_pos_ = used > scan_pos_ ? 0 : scan_pos_ - used;
      if (ec == bhttp::error::need_more) {
        if (buffer_.size() > limits.max_header_bytes) {
          Fail(431, absl::StrCat("request header exceeds ", limits.max_header_bytes, " bytes"));
        }
        return;
      }
      if (ec) {
        // body_limit comes from the header's Content-Length: the target is known.
        auto [status, message] = wire::ParseError(ec, limits);
        return Fail(status, std::move(message));
      }
      if (!parser_->is_header_done()) return;
      if (const auto length = parser_->content_length();
          length.has_value() && limits.large_body_bytes > limits.max_body_bytes) {
        const beast::string_view target = parser_->get().target();
        const absl::string_view path =
            absl::string_view(target.data(), target.size()).substr(0, target.find('?'));
        const size_t limit = (!limits.large_body_path.empty() && path == limits.large_body_path)
                                 ? limits.large_body_bytes
                                 : limits.max_body_bytes;
        if (*length > limit) {
          return Fail(413, absl::StrCat("request body exceeds the limit of ", limit, " bytes"));
        }
      }
      if (const auto length = parser_->content_length();
          length.has_value() && limits.body_budget != nullptr &&
          !limits.body_budget->TryCharge(static_cast<int64_t>(*length), "http", &body_charge_)) {
        return Fail(503, limits.body_budget->RefusalMessage(static_cast<int64_t>(*length)));
      }
      if (parser_->chunked()) {
        return Fail(411,
                    "request bodies must have a Content-Length (chunked transfer encoding is "
                    "not accepted)");
      }
      if (!parser_->is_done() &&
          absl::EqualsIgnoreCase(std::string(parser_->get()[bhttp::field::expect]),
                                 "100-continue")) {
        Queue("HTTP/1.1 100 Continue\r\n\r\n");
      }
      parser_->eager(true);
      header_since_.store(0);
      phase_ = Phase::kBody;
      if (!parser_->is_done()) ArmRead(limits.body_timeout);
    }
    if (phase_ == Phase::kBody) {
      if (!parser_->is_done()) {
        if (buffer_.size() == 0) return;
        beast::error_code ec;
        buffer_.consume(parser_->put(buffer_.data(), ec));
        if (ec == bhttp::error::need_more) return;
        if (ec) {
          auto [status, message] = wire::ParseError(ec, limits);
          return Fail(status, std::move(message));
        }
        if (!parser_->is_done()) continue;
      }
      return StartHandling();
    }
    return;
  }
}

void Session::StartHandling() {
  DisarmRead();
  bhttp::request<bhttp::string_body> message = parser_->release();
  parser_.reset();
  phase_ = Phase::kHandling;
  first_request_ = false;
  http10_ = message.version() < 11;
  close_after_ = stopping_ || !message.keep_alive();
  answered_ = false;
  streaming_ = false;
  ServerRequest request;
  const beast::string_view method = message.method_string();
  request.method.assign(method.data(), method.size());
  const beast::string_view target = message.target();
  request.path.assign(target.data(), target.size());
  if (const size_t query = request.path.find('?'); query != std::string::npos) {
    request.path.resize(query);
  }
  request.body = std::move(message.body());
  exchange_ = std::make_shared<ExchangeImpl>(weak_from_this(), executor(), shared_.gate);
  shared_.handler(std::move(request), exchange_);
  MaybeRead();  // notices a client that goes away, and buffers pipelined requests
}

void Session::Fail(int status, std::string message) {
  DisarmRead();
  // Every answer the transport gives itself is reported (counted by the service), with the
  // request's target once its header was read.
  if (shared_.on_refused) {
    absl::string_view target;  // empty until the request line was parsed
    if (parser_.has_value()) {
      const beast::string_view t = parser_->get().target();
      target = absl::string_view(t.data(), t.size());
    }
    shared_.on_refused(target, status);
  }
  parser_.reset();
  body_charge_.Release();
  header_since_.store(0);
  phase_ = Phase::kDraining;
  ServerResponse response;
  response.status = status;
  response.body = ErrorBody(message, status >= 500 ? "server_error" : "invalid_request_error", "");
  response.close = true;
  if (status == 503) response.headers.emplace_back("Retry-After", "1");
  Queue(wire::Head(response, false, true, wire::Framing::kLength) + response.body);
}

void Session::Queue(std::string bytes) {
  if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
  out_.push_back(std::move(bytes));
  if (!writing_) WriteNext();
}

void Session::WriteNext() {
  in_flight_.clear();
  for (std::string& piece : out_) in_flight_ += piece;
  out_.clear();
  writing_ = true;
  const uint64_t generation = ++write_generation_;
  write_timer_.expires_after(Chrono(shared_.limits.write_timeout));
  write_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    if (ec || generation != self->write_generation_ || !self->writing_) return;
    self->ClientGone();  // the client stopped reading
  });
  net::async_write(
      socket_, net::buffer(in_flight_),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
}

void Session::OnWrite(beast::error_code ec) {
  writing_ = false;
  ++write_generation_;
  write_timer_.cancel();
  if (phase_ == Phase::kClosed) return;
  if (ec) return ClientGone();
  if (!out_.empty()) return WriteNext();
  if (phase_ == Phase::kDraining) return Linger();
  if (phase_ == Phase::kHandling && answered_) FinishExchange();
}

void Session::FinishExchange() {
  exchange_.reset();
  body_charge_.Release();
  if (close_after_) return Linger();
  phase_ = Phase::kIdle;
  const ServerLimits& limits = shared_.limits;
  // Under pressure (above 3/4 of the cap) an idle keep-alive connection is kept less long.
  const bool pressure = shared_.connections.load() * int64_t{4} > limits.max_connections * 3;
  ArmRead(pressure ? std::min(limits.idle_timeout, limits.pressure_idle_timeout)
                   : limits.idle_timeout);
  Parse();
  if (phase_ == Phase::kIdle) SetIdle(true);
  MaybeRead();
}

void Session::Linger() {
  phase_ = Phase::kLingering;
  body_charge_.Release();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.clear();
  ++read_generation_;
  const uint64_t generation = read_generation_;
  read_timer_.expires_after(kLinger);
  read_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    if (!ec && generation == self->read_generation_) self->Close();
  });
  MaybeRead();
}

void Session::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  idle_since_.store(0);
  header_since_.store(0);
  body_charge_.Release();
  ++read_generation_;
  ++write_generation_;
  read_timer_.cancel();
  write_timer_.cancel();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
}

void Session::ClientGone() {
  if (phase_ == Phase::kHandling && !answered_) AbortExchange(Abort::kClientGone);
  Close();
}

void Session::AbortExchange(Abort kind) {
  if (exchange_ == nullptr) return;
  if (auto handler = exchange_->TakeAbort()) handler(kind);
}

void Session::ArmRead(absl::Duration timeout) {
  const uint64_t generation = ++read_generation_;
  read_timer_.expires_after(Chrono(timeout));
  read_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    if (!ec && generation == self->read_generation_) self->OnReadDeadline();
  });
}

void Session::DisarmRead() {
  ++read_generation_;
  read_timer_.cancel();
}

void Session::OnReadDeadline() {
  switch (phase_) {
    case Phase::kIdle:
      return Close();
    case Phase::kHeader:
      return Fail(408, absl::StrCat("request header not received within ",
                                    absl::FormatDuration(shared_.limits.header_timeout)));
    case Phase::kBody:
      return Fail(408, absl::StrCat("request body not received within ",
                                    absl::FormatDuration(shared_.limits.body_timeout)));
    default:
      return;
  }
}

}  // namespace abcd::http::internal
