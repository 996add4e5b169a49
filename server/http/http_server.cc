#include "server/http/http_server.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/http_connection.h"

namespace abcd::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using internal::Session;
using internal::Shared;
using tcp = net::ip::tcp;

class HttpServer::Impl {
 public:
  Impl(ServerLimits limits, RequestHandler handler, RefusalHook on_refused)
      : shared_(limits, std::move(handler), std::move(on_refused)) {}
  ~Impl() { Stop(); }

  absl::Status Start(const std::string& host, int port, int* bound_port);
  void Stop();
  int connections() const { return shared_.connections.load(); }
  int64_t evicted() const { return shared_.evicted.load(); }

 private:
  // At the cap: claims the connection idle longest for eviction (posted to its strand), else
  // the one whose incomplete header began first; false when every connection has a complete
  // request header (or none could be claimed).
  bool EvictIdlest();
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  std::vector<std::shared_ptr<Session>> Snapshot();
  bool WaitForNoConnections(absl::Duration timeout);

  Shared shared_;
  std::unique_ptr<net::io_context> io_;
  std::optional<tcp::acceptor> acceptor_;
  std::optional<net::steady_timer> retry_;
  std::vector<std::thread> threads_;
  bool started_ = false;
  bool stopped_ = false;
};

absl::Status HttpServer::Impl::Start(const std::string& host, int port, int* bound_port) {
  if (started_ || stopped_) return absl::FailedPreconditionError("HttpServer::Start runs once");
  const ServerLimits& limits = shared_.limits;
  io_ = std::make_unique<net::io_context>(std::max(1, limits.io_threads));
  const std::string where = absl::StrCat(host, ":", port);
  beast::error_code ec;
  tcp::resolver resolver(*io_);
  const auto endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", where, ": ", ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.emplace(net::make_strand(*io_));
  // SO_REUSEADDR only: on Linux it lets a restart bind over TIME_WAIT connections, but never a
  // second listener on the same port (that would take SO_REUSEPORT, which is not set).
  if (acceptor_->open(endpoint.protocol(), ec); !ec) {
    acceptor_->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(std::max(1, limits.listen_backlog), ec);
  }
  if (ec) {
    acceptor_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
  }
  *bound_port = acceptor_->local_endpoint().port();
  retry_.emplace(acceptor_->get_executor());
  Accept();
  started_ = true;
  for (int i = 0; i < std::max(1, limits.io_threads); ++i) {
    threads_.emplace_back([this] { io_->run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Impl::Accept() {
  acceptor_->async_accept(net::make_strand(*io_), [this](beast::error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpServer::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (shared_.stopping.load() || !acceptor_->is_open()) return;
  if (ec) {
    // Out of descriptors or a transient failure: back off instead of spinning.
    retry_->expires_after(std::chrono::milliseconds(20));
    retry_->async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && !shared_.stopping.load()) Accept();
    });
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  const bool refuse =
      shared_.connections.load() >= shared_.limits.max_connections && !EvictIdlest();
  auto session = std::make_shared<Session>(std::move(socket), shared_, refuse);
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.sessions.emplace(session.get(), session);
  }
  net::dispatch(session->executor(), [session] { session->Begin(); });
  Accept();
}

bool HttpServer::Impl::EvictIdlest() {
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::shared_ptr<Session> victim;
    int64_t since = 0;
    bool header = false;  // the victim is the oldest incomplete header (none is idle)
    {
      std::lock_guard<std::mutex> lock(shared_.mu);
      for (auto& [raw, weak] : shared_.sessions) {
        const int64_t idle = raw->idle_since();
        const int64_t partial = raw->header_since();
        const bool as_header = idle <= 0;
        const int64_t t = as_header ? partial : idle;
        if (t <= 0 || (as_header && !header && victim != nullptr)) continue;
        if (victim != nullptr && header == as_header && t >= since) continue;
        if (auto session = weak.lock()) {
          victim = std::move(session);
          since = t;
          header = as_header;
        }
      }
    }
    if (victim == nullptr) return false;
    if (!victim->Claim(header, since)) continue;  // it changed (or was claimed) meanwhile
    net::post(victim->executor(), [victim, header] { victim->Evict(header); });
    return true;
  }
  return false;
}

std::vector<std::shared_ptr<Session>> HttpServer::Impl::Snapshot() {
  std::vector<std::shared_ptr<Session>> sessions;
  std::lock_guard<std::mutex> lock(shared_.mu);
  for (auto& [raw, weak] : shared_.sessions) {
    if (auto session = weak.lock()) sessions.push_back(std::move(session));
  }
  return sessions;
}

bool HttpServer::Impl::WaitForNoConnections(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (shared_.connections.load() + shared_.refused.load() > 0) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

void HttpServer::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  shared_.stopping.store(true);
  net::post(acceptor_->get_executor(), [this] {
    beast::error_code ignored;
    acceptor_->close(ignored);
    retry_->cancel();
  });
  for (auto& session : Snapshot()) {
    net::post(session->executor(), [session] { session->OnStop(); });
  }
  if (!WaitForNoConnections(shared_.limits.stop_timeout)) {
    for (auto& session : Snapshot()) {
      net::post(session->executor(), [session] { session->ForceClose(); });
    }
    WaitForNoConnections(absl::Milliseconds(200));
  }
  io_->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  shared_.gate->Close();
  retry_.reset();
  acceptor_.reset();
  io_.reset();  // destroys what is left; unanswered exchanges are aborted here
}

HttpServer::HttpServer(ServerLimits limits, RequestHandler handler, RefusalHook on_refused)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), std::move(on_refused))) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(const std::string& host, int port) {
  int bound = -1;
  absl::Status status = impl_->Start(host, port, &bound);
  if (status.ok()) port_ = bound;
  return status;
}

void HttpServer::Stop() { impl_->Stop(); }

int HttpServer::connections() const { return impl_->connections(); }

int64_t HttpServer::evicted() const { return impl_->evicted(); }

}  // namespace abcd::http
