// The HTTP transport (server/http/http_server.h) on 127.0.0.1 with a small handler, driven over
// raw sockets: limits enforced while reading, deadlines, the connection cap (idle connections
// evicted first), the body budget, pipelining,
// keep-alive, aborts on disconnect and on Stop, and exclusive binding.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace abcd::http {
namespace {

class RawClient {
 public:
  explicit RawClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  const std::string& received() const { return received_; }
  // Reads until `needle` was received; false on timeout or EOF first.
  bool ReadUntil(const std::string& needle, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (received_.find(needle) == std::string::npos) {
      if (!ReadSome(give_up)) return false;
    }
    return true;
  }
  // Reads until the server closes; false on timeout.
  bool ReadUntilClosed(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (!closed_) {
      if (!ReadSome(give_up) && !closed_) return false;
    }
    return true;
  }

 private:
  bool ReadSome(absl::Time give_up) {
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(give_up - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return false;
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    received_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  bool connected_ = false;
  bool closed_ = false;
  std::string received_;
};

std::string Post(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// /echo answers its body; /hold keeps the exchange (answered by Stop or never); /stream
// starts a stream that ends only when the server stops.
class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerLimits limits) {
    server_ = std::make_unique<HttpServer>(
        limits,
        [this](ServerRequest request, std::shared_ptr<Exchange> exchange) {
          Handle(std::move(request), std::move(exchange));
        },
        [this](absl::string_view target, int status) {
          std::lock_guard<std::mutex> lock(mu_);
          refusals_.push_back(absl::StrCat(status, " ", target));
        });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  }
  void SetUp() override {
    ServerLimits limits;
    limits.max_line_bytes = 1024;
    limits.max_header_bytes = 4096;
    limits.max_body_bytes = 2048;
    StartServer(limits);
  }
  void TearDown() override { server_.reset(); }

  void Handle(ServerRequest request, std::shared_ptr<Exchange> exchange) {
    if (request.path == "/hold" || request.path == "/stream") {
      const bool stream = request.path == "/stream";
      held_.fetch_add(1);
      exchange->OnAbort([this, exchange, stream](Abort kind) {
        aborts_.fetch_add(1);
        if (kind == Abort::kClientGone) return;
        stopping_aborts_.fetch_add(1);
        if (stream) {
          exchange->StreamChunk("data: stopped\n\n");
          return exchange->EndStream();
        }
        ServerResponse response;
        response.status = 503;
        response.body = "stopping";
        exchange->Reply(std::move(response));
      });
      if (stream) {
        ServerResponse head;
        head.content_type = "text/event-stream";
        exchange->StartStream(std::move(head));
        exchange->StreamChunk("data: first\n\n");
      }
      return;
    }
    ServerResponse response;
    response.content_type = "text/plain";
    response.body = absl::StrCat(request.method, " ", request.path, " ", request.body);
    exchange->Reply(std::move(response));
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> held_{0};  // /hold and /stream exchanges handed to the handler
  std::atomic<int> aborts_{0};
  std::atomic<int> stopping_aborts_{0};
  std::mutex mu_;
  std::vector<std::string> refusals_;
};

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrderOnOneConnection) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send(Post("/echo", "one") + Post("/echo", "two") +
                          "GET /echo?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(client.ReadUntil("GET /echo ", absl::Seconds(5))) << client.received();
  const std::string& got = client.received();
  const size_t one = got.find("POST /echo one");
  const size_t two = got.find("POST /echo two");
  ASSERT_NE(one, std::string::npos);
  ASSERT_NE(two, std::string::npos);
  EXPECT_LT(one, two);
  EXPECT_LT(two, got.find("GET /echo "));
  // Keep-alive: the same connection serves another request afterwards.
  ASSERT_TRUE(client.Send(Post("/echo", "three")));
  EXPECT_TRUE(client.ReadUntil("POST /echo three", absl::Seconds(5)));
}

TEST_F(HttpServerTest, OverlongHeaderLineIsRefusedBeforeItEnds) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /echo HTTP/1.1\r\nX-Big: " + std::string(1100, 'a')));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 431", absl::Seconds(2))) << client.received();
  EXPECT_TRUE(client.ReadUntilClosed(absl::Seconds(3)));
}

TEST_F(HttpServerTest, OverlongRequestLineIs414) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /" + std::string(1100, 'a')));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 414", absl::Seconds(2))) << client.received();
}

TEST_F(HttpServerTest, OverlongWholeHeaderIs431) {
  RawClient client(server_->port());
  std::string request = "GET /echo HTTP/1.1\r\n";
  for (int i = 0; i < 8; ++i)
    absl::StrAppend(&request, "X-", i, ": ", std::string(900, 'b'), "\r\n");
  ASSERT_TRUE(client.Send(request));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 431", absl::Seconds(2))) << client.received();
}

TEST_F(HttpServerTest, BadContentLengthIs400AtOnce) {
  for (const std::string length : {"-5", "abc", "1, 2"}) {
    SCOPED_TRACE(length);
    RawClient client(server_->port());
    const absl::Time start = absl::Now();
    ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: " + length + "\r\n\r\n"));
    EXPECT_TRUE(client.ReadUntil("HTTP/1.1 400", absl::Seconds(2))) << client.received();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
    EXPECT_TRUE(absl::StrContains(client.received(), "Content-Length")) << client.received();
  }
}

TEST_F(HttpServerTest, OversizedBodyIs413BeforeTheBodyIsSent) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("POST /v1/completions HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 413", absl::Seconds(2))) << client.received();
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(refusals_, std::vector<std::string>{"413 /v1/completions"});
}

// One path (POST /v1/sessions: an imported session blob) may have a larger body; every other
// path keeps max_body_bytes, and both are refused from the Content-Length alone.
TEST_F(HttpServerTest, LargeBodyPathHasItsOwnLimit) {
  server_.reset();
  ServerLimits limits;
  limits.max_body_bytes = 2048;
  limits.large_body_path = "/big";
  limits.large_body_bytes = 8192;
  StartServer(limits);
  {
    RawClient client(server_->port());
    ASSERT_TRUE(client.Send(Post("/big?x=1", std::string(5000, 'b'))));
    EXPECT_TRUE(client.ReadUntil("POST /big bbbb", absl::Seconds(2))) << client.received();
  }
  for (const std::string path : {"/echo", "/big/more"}) {
    RawClient client(server_->port());
    ASSERT_TRUE(
        client.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nContent-Length: 5000\r\n\r\n")));
    EXPECT_TRUE(client.ReadUntil("HTTP/1.1 413", absl::Seconds(2))) << client.received();
    EXPECT_TRUE(absl::StrContains(client.received(), "limit of 2048 bytes")) << client.received();
  }
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("POST /big HTTP/1.1\r\nContent-Length: 9000\r\n\r\n"));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 413", absl::Seconds(2))) << client.received();
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(refusals_, (std::vector<std::string>{"413 /echo", "413 /big/more", "413 /big"}));
}

// Whatever the transport answers by itself is reported to the service (which counts it in
// abcd_requests_total), with the target when the header was read and empty before that.
TEST_F(HttpServerTest, EveryTransportRefusalIsReported) {
  server_.reset();
  ServerLimits limits;
  limits.max_line_bytes = 1024;
  StartServer(limits);
  {
    RawClient client(server_->port());
    ASSERT_TRUE(client.Send("GET /" + std::string(1100, 'a')));
    EXPECT_TRUE(client.ReadUntil("HTTP/1.1 414", absl::Seconds(2))) << client.received();
  }
  {
    RawClient client(server_->port());
    ASSERT_TRUE(client.Send("GET /echo HTTP/1.1\r\nX-Big: " + std::string(1100, 'a')));
    EXPECT_TRUE(client.ReadUntil("HTTP/1.1 431", absl::Seconds(2))) << client.received();
  }
  {
    RawClient client(server_->port());
    ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nContent-Length: abc\r\n\r\n"));
    EXPECT_TRUE(client.ReadUntil("HTTP/1.1 400", absl::Seconds(2))) << client.received();
  }
  std::vector<std::string> got;
  {
    std::lock_guard<std::mutex> lock(mu_);
    got.swap(refusals_);
  }
  server_.reset();
  limits.max_connections = 1;
  StartServer(limits);
  {
    RawClient held(server_->port());  // busy: nothing idle to evict
    ASSERT_TRUE(held.Send(Post("/hold", "")));
    absl::SleepFor(absl::Milliseconds(50));
    RawClient over(server_->port());
    EXPECT_TRUE(over.ReadUntil("HTTP/1.1 503", absl::Seconds(2))) << over.received();
  }
  std::lock_guard<std::mutex> lock(mu_);
  got.insert(got.end(), refusals_.begin(), refusals_.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"400 /echo", "414 ", "431 ", "503 "}));
}

TEST_F(HttpServerTest, ChunkedBodyIs411) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello"));
  EXPECT_TRUE(client.ReadUntil("HTTP/1.1 411", absl::Seconds(2))) << client.received();
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimAnswer) {
  RawClient client(server_->port());
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"));
  ASSERT_TRUE(client.ReadUntil("HTTP/1.1 100 Continue\r\n\r\n", absl::Seconds(2)));
  ASSERT_TRUE(client.Send("body"));
  EXPECT_TRUE(client.ReadUntil("POST /echo body", absl::Seconds(2))) << client.received();
}

TEST_F(HttpServerTest, SlowHeaderIsClosedAtItsDeadlineAndIdleConnectionsToo) {
  server_.reset();
  ServerLimits limits;
  limits.header_timeout = absl::Milliseconds(300);
  limits.idle_timeout = absl::Milliseconds(300);
  StartServer(limits);
  RawClient slow(server_->port());
  RawClient silent(server_->port());
  RawClient idle(server_->port());
  ASSERT_TRUE(idle.Send("GET /echo HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(idle.ReadUntil("GET /echo", absl::Seconds(2)));
  const absl::Time start = absl::Now();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(slow.Send(i == 0 ? "GET /echo HTTP/1.1\r\n" : "X: y\r\n"));
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(slow.ReadUntilClosed(absl::Seconds(3)));
  EXPECT_TRUE(absl::StartsWith(slow.received(), "HTTP/1.1 408")) << slow.received();
  EXPECT_TRUE(silent.ReadUntilClosed(absl::Seconds(3)));
  EXPECT_TRUE(idle.ReadUntilClosed(absl::Seconds(3)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// At the cap a new connection closes the one idle longest (a keep-alive connection between
// requests, or one that has sent nothing); only when every connection is busy is it refused.
TEST_F(HttpServerTest, AtTheCapTheIdlestConnectionMakesRoomElse503) {
  server_.reset();
  ServerLimits limits;
  limits.max_connections = 2;
  StartServer(limits);
  RawClient a(server_->port());
  ASSERT_TRUE(a.Send("GET /echo HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(a.ReadUntil("GET /echo", absl::Seconds(2)));  // idle since its answer
  absl::SleepFor(absl::Milliseconds(20));
  RawClient b(server_->port());
  ASSERT_TRUE(b.Send("GET /echo HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(b.ReadUntil("GET /echo", absl::Seconds(2)));  // idle, more recently
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send("GET /echo HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(c.ReadUntil("GET /echo", absl::Seconds(2))) << c.received();
  EXPECT_TRUE(a.ReadUntilClosed(absl::Seconds(2)));  // a, the idlest, made room
  EXPECT_EQ(server_->evicted(), 1);
  ASSERT_TRUE(b.Send("GET /echo HTTP/1.1\r\n\r\n"));  // b still serves
  EXPECT_TRUE(b.ReadUntil("HTTP/1.1 200 OK", absl::Seconds(2))) << b.received();

  // Both busy: the new one is refused. b is marked idle once its answer has been written, a
  // moment after the client read it: only then can y's arrival evict it (else y is refused).
  absl::SleepFor(absl::Milliseconds(50));
  RawClient x(server_->port());
  RawClient y(server_->port());
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200 && server_->connections() > 2; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return server_->connections() == 2;
  }());
  ASSERT_TRUE(x.Send(Post("/hold", "")));
  ASSERT_TRUE(y.Send(Post("/hold", "")));
  // Both requests handed to the handler (busy), not merely sent: under load a fixed sleep let z
  // arrive while one of them still looked idle, and z evicted it instead of being refused.
  ASSERT_TRUE([&] {
    for (int i = 0; i < 300 && held_.load() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
    return held_.load() == 2;
  }()) << "held "
       << held_.load() << ", evicted " << server_->evicted();
  RawClient z(server_->port());
  EXPECT_TRUE(z.ReadUntil("HTTP/1.1 503", absl::Seconds(2))) << z.received();
  EXPECT_TRUE(z.ReadUntilClosed(absl::Seconds(3)));
}

// Issue 44: at the cap with no idle connection, a new one closes the connection whose request
// header has been incomplete longest, so clients dripping partial headers cannot keep new ones
// out; a connection whose header is complete (its body on the way) is never taken.
TEST_F(HttpServerTest, AtTheCapTheOldestPartialHeaderMakesRoom) {
  server_.reset();
  ServerLimits limits;
  limits.max_connections = 4;
  StartServer(limits);
  auto wait_for_connections = [&](int n) {
    for (int i = 0; i < 300 && server_->connections() != n; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return server_->connections() == n;
  };
  RawClient uploading(server_->port());  // header complete, body pending: not evictable
  ASSERT_TRUE(uploading.Send("POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345"));
  std::vector<std::unique_ptr<RawClient>> drippers;
  for (int i = 0; i < 3; ++i) {
    drippers.push_back(std::make_unique<RawClient>(server_->port()));
    ASSERT_TRUE(drippers.back()->Send("GET /echo HTTP/1.1\r\nX-Drip: a"));
    absl::SleepFor(absl::Milliseconds(30));  // each header begins later than the one before
  }
  for (int round = 0; round < 2; ++round) {
    if (round > 0) {  // back at the cap with a newer dripper
      ASSERT_TRUE(wait_for_connections(3));
      drippers.push_back(std::make_unique<RawClient>(server_->port()));
      ASSERT_TRUE(drippers.back()->Send("GET /echo HTTP/1.1\r\nX-Drip: b"));
    }
    ASSERT_TRUE(wait_for_connections(4));
    absl::SleepFor(absl::Milliseconds(50));  // their bytes read: headers begun
    RawClient fresh(server_->port());
    ASSERT_TRUE(fresh.Send("GET /healthz HTTP/1.1\r\n\r\n"));
    EXPECT_TRUE(fresh.ReadUntil("HTTP/1.1 200 OK", absl::Seconds(2))) << fresh.received();
    // The dripper whose header began first made room.
    EXPECT_TRUE(drippers[round]->ReadUntilClosed(absl::Seconds(2))) << round;
    EXPECT_EQ(server_->evicted(), round + 1);
  }
  // The upload was never taken: its body completes and is answered.
  ASSERT_TRUE(uploading.Send("67890"));
  EXPECT_TRUE(uploading.ReadUntil("POST /echo 1234567890", absl::Seconds(2)))
      << uploading.received();
  // The last dripper is still open: its header completes and is answered.
  ASSERT_TRUE(drippers[2]->Send("\r\n\r\n"));
  EXPECT_TRUE(drippers[2]->ReadUntil("GET /echo", absl::Seconds(2))) << drippers[2]->received();
}

// The body budget: a body is charged its Content-Length before any of it is buffered; one that
// does not fit gets 503 at once; the charge is released when the exchange ends.
TEST_F(HttpServerTest, BodiesBeyondTheBudgetAre503AtTheirHeader) {
  server_.reset();
  BodyBudget budget(4000, 100);  // bodies over 100 bytes may use 3000
  ServerLimits limits;
  limits.max_body_bytes = 10000;
  limits.body_budget = &budget;
  StartServer(limits);
  RawClient stalled(server_->port());
  ASSERT_TRUE(stalled.Send("POST /echo HTTP/1.1\r\nContent-Length: 2500\r\n\r\nab"));
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200 && budget.used() == 0; ++i) absl::SleepFor(absl::Milliseconds(5));
    return budget.used() == 2500;
  }());
  RawClient refused(server_->port());
  ASSERT_TRUE(refused.Send("POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n"));
  EXPECT_TRUE(refused.ReadUntil("HTTP/1.1 503", absl::Seconds(2))) << refused.received();
  EXPECT_TRUE(refused.ReadUntil("--max_inflight_body_mb", absl::Seconds(2)));
  EXPECT_TRUE(absl::StrContains(refused.received(), "Retry-After: 1")) << refused.received();
  EXPECT_EQ(budget.refused_http(), 1);
  RawClient small(server_->port());  // a small body still fits
  ASSERT_TRUE(small.Send(Post("/echo", "tiny")));
  EXPECT_TRUE(small.ReadUntil("POST /echo tiny", absl::Seconds(2))) << small.received();
  ASSERT_TRUE(stalled.Send(std::string(2498, 'x')));
  EXPECT_TRUE(stalled.ReadUntil("POST /echo abxx", absl::Seconds(2)));
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200 && budget.used() > 0; ++i) absl::SleepFor(absl::Milliseconds(5));
    return budget.used() == 0;
  }());
  RawClient later(server_->port());
  ASSERT_TRUE(later.Send(Post("/echo", std::string(1000, 'y'))));
  EXPECT_TRUE(later.ReadUntil("POST /echo yyy", absl::Seconds(2))) << later.received();
}

TEST_F(HttpServerTest, ClientGoneAbortsTheExchangeAtOnce) {
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send(Post("/hold", "")));
  absl::SleepFor(absl::Milliseconds(50));
  client.Close();
  const absl::Time give_up = absl::Now() + absl::Seconds(2);
  while (aborts_.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(aborts_.load(), 1);
  EXPECT_EQ(stopping_aborts_.load(), 0);
}

TEST_F(HttpServerTest, StopLetsWaitingExchangesAnswerThenCloses) {
  RawClient hold(server_->port());
  RawClient stream(server_->port());
  RawClient slow(server_->port());
  ASSERT_TRUE(hold.Send(Post("/hold", "")));
  ASSERT_TRUE(stream.Send(Post("/stream", "")));
  ASSERT_TRUE(stream.ReadUntil("data: first", absl::Seconds(2)));
  ASSERT_TRUE(slow.Send("GET /echo HTTP/1.1\r\n"));
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  server_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(stopping_aborts_.load(), 2);
  EXPECT_TRUE(hold.ReadUntil("stopping", absl::Seconds(2))) << hold.received();
  EXPECT_TRUE(absl::StartsWith(hold.received(), "HTTP/1.1 503")) << hold.received();
  EXPECT_TRUE(stream.ReadUntil("data: stopped\n\n\r\n0\r\n\r\n", absl::Seconds(2)))
      << stream.received();
  EXPECT_TRUE(slow.ReadUntilClosed(absl::Seconds(2)));
}

TEST_F(HttpServerTest, SecondServerOnTheSamePortFailsToStart) {
  HttpServer second(
      ServerLimits{}, [](ServerRequest, std::shared_ptr<Exchange>) {}, nullptr);
  const absl::Status status = second.Start("127.0.0.1", server_->port());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(status.message(), "in use")) << status;
}

}  // namespace
}  // namespace abcd::http
