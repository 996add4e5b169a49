// abcd-server's HTTP front end against hostile and clumsy clients (issue 19), on the real binary
// over loopback: slowloris connections and endless header lines next to probes and a
// completion, RSS and SIGTERM under them; 300 concurrent SSE completions against a low
// in-flight cap (429, counted); 256 clients connecting at once; pipelining; SSE streams cut by
// SIGTERM; exclusive ports. Each test is bounded to a few seconds.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::TimeLimit;
using testing::UnderSanitizers;

using testing::kLmDir;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads from fd until `needle` arrives (true), EOF/error or the timeout (false). *error is set
// when the connection was reset.
bool ReadUntil(int fd, const std::string& needle, absl::Duration timeout, std::string* got,
               bool* reset = nullptr) {
  const absl::Time give_up = absl::Now() + timeout;
  while (got->find(needle) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(give_up - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return false;
    char buffer[8192];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == ECONNRESET && reset != nullptr) *reset = true;
    if (n <= 0) return false;
    got->append(buffer, static_cast<size_t>(n));
  }
  return true;
}

std::string Post(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ",
                      "application/json\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

int64_t RssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kb = 0;
      for (absl::string_view part : absl::StrSplit(line.substr(6), ' ', absl::SkipEmpty())) {
        if (absl::SimpleAtoi(part, &kb)) return kb;
      }
    }
  }
  return -1;
}

class HttpHostileTest : public testing::ServerTest {
 protected:
  static void SetUpTestSuite() {
    // 500+ client sockets here and as many in the server (which inherits this limit; it also
    // raises its own soft limit to the hard one).
    rlimit files{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
    files.rlim_cur = files.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
    ASSERT_GE(files.rlim_cur, rlim_t{2048}) << "this test needs ulimit -n >= 2048";
  }

  void Start(std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"--device", "cpu", "--models", kLmDir});
    ServerTest::Start(std::move(args));
  }

  // Seconds one GET or POST takes on a fresh connection; -1 when it fails.
  double Timed(const std::string& method, const std::string& path, const std::string& body = "") {
    httplib::Client client("127.0.0.1", server_->http_port());
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(2, 0);
    const absl::Time start = absl::Now();
    httplib::Result result = method == "GET" ? client.Get(path.c_str())
                                             : client.Post(path.c_str(), body, "application/json");
    if (!result || result->status != 200) return -1;
    return absl::ToDoubleSeconds(absl::Now() - start);
  }

  double Metric(const std::string& sample) {
    httplib::Client client("127.0.0.1", server_->http_port());
    client.set_read_timeout(2, 0);
    return testing::MetricSample(client, sample, /*absent=*/0);
  }
};

TEST_F(HttpHostileTest, SlowlorisAndEndlessHeaderLinesStarveNothing) {
  Start({"--drain_grace_seconds", "1"});
  const int port = server_->http_port();
  ASSERT_GT(Timed("GET", "/healthz"), 0);
  const int64_t rss_before = RssKb(server_->pid());
  ASSERT_GT(rss_before, 0);

  // 500 connections that send a header slowly, a byte per connection per 200 ms.
  std::vector<int> slow;
  for (int i = 0; i < 500; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nX-Slow: "));
    slow.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread drip([&] {
    while (!done.load()) {
      for (int fd : slow) SendAll(fd, "a");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // 4 connections streaming one endless header line; each reconnects when refused.
  std::atomic<int64_t> endless_bytes{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> endless;
  for (int t = 0; t < 4; ++t) {
    endless.emplace_back([&] {
      const std::string chunk(64 << 10, 'x');
      while (!done.load()) {
        const int fd = Connect(port);
        if (fd < 0) continue;
        SendAll(fd, "GET /healthz HTTP/1.1\r\nX-Big: ");
        // The server answers 431 once the line passes 8 KiB: look for it between chunks (it
        // is lost if the client keeps sending until the server's linger ends in a reset).
        while (!done.load() && SendAll(fd, chunk)) {
          endless_bytes.fetch_add(chunk.size());
          pollfd p{fd, POLLIN, 0};
          if (poll(&p, 1, 1) > 0) break;  // also paces the sender (64 KiB per ms at most)
        }
        std::string got;
        if (ReadUntil(fd, "HTTP/1.1 431", absl::Milliseconds(500), &got)) refused.fetch_add(1);
        close(fd);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int round = 0; round < 3; ++round) {
    const double health = Timed("GET", "/healthz");
    const double metrics = Timed("GET", "/metrics");
    const double completion =
        Timed("POST", "/v1/completions", R"({"prompt": "The", "max_tokens": 4, "temperature": 0})");
    EXPECT_GT(health, 0);
    EXPECT_LT(health, TimeLimit(1.0));
    EXPECT_GT(metrics, 0);
    EXPECT_LT(metrics, TimeLimit(1.0));
    EXPECT_GT(completion, 0);
    EXPECT_LT(completion, TimeLimit(1.0));
  }
  const int64_t rss_under_attack = RssKb(server_->pid());
  if (!UnderSanitizers()) {
    EXPECT_LT(rss_under_attack - rss_before, 50 << 10)
        << "RSS grew from " << rss_before << " kB to " << rss_under_attack << " kB";
  }
  EXPECT_GT(refused.load(), 0) << "endless header lines were never refused with 431";
  std::cout << "endless header bytes sent: " << endless_bytes.load() << ", refused "
            << refused.load() << " times; RSS " << rss_before << " -> " << rss_under_attack
            << " kB\n";

  // SIGTERM with every slow connection still open: out within grace (1 s) + 2 s.
  const absl::Time term = absl::Now();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(TimeLimit(3.0)), 0) << server_->Log();
  EXPECT_LT(absl::Now() - term, absl::Seconds(3));
  done.store(true);
  drip.join();
  for (std::thread& t : endless) t.join();
  for (int fd : slow) close(fd);
}

TEST_F(HttpHostileTest, ConcurrentSseBeyondTheInflightCapGet429Counted) {
  Start({"--http_max_inflight", "64"});
  const int port = server_->http_port();
  constexpr int kClients = 300;
  const std::string body =
      R"({"prompt": "The", "max_tokens": 200, "ignore_eos": true, "stream": true})";
  std::vector<int> fds;
  for (int i = 0; i < kClients; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(SendAll(fd, Post("/v1/completions", body)));
    fds.push_back(fd);
  }
  // Every client has its answer head: 200 (a stream) or 429.
  int streaming = 0;
  int refused = 0;
  for (int fd : fds) {
    std::string got;
    ASSERT_TRUE(ReadUntil(fd, "\r\n", absl::Seconds(10), &got));
    if (absl::StartsWith(got, "HTTP/1.1 200")) ++streaming;
    if (absl::StartsWith(got, "HTTP/1.1 429")) ++refused;
  }
  EXPECT_EQ(streaming + refused, kClients);
  EXPECT_GE(streaming, 1);
  EXPECT_GE(refused, kClients - 64 * 2) << "the cap of 64 in flight did not hold";
  // Probes answer while the streams run.
  const double health = Timed("GET", "/healthz");
  EXPECT_GT(health, 0);
  EXPECT_LT(health, TimeLimit(1.0));
  const double ready = Timed("GET", "/readyz");
  EXPECT_GT(ready, 0);
  EXPECT_LT(ready, TimeLimit(1.0));
  EXPECT_EQ(Metric(R"(abcd_requests_total{kind="completions",status="resource_exhausted"})"),
            refused);
  std::cout << streaming << " streams, " << refused << " x 429; /healthz " << health
            << " s, /readyz " << ready << " s under them\n";
  for (int fd : fds) close(fd);
}

TEST_F(HttpHostileTest, TwoHundredFiftySixClientsConnectingAtOnceGetNoReset) {
  Start();
  const int port = server_->http_port();
  constexpr int kClients = 256;
  std::atomic<bool> go{false};
  std::atomic<int> answered{0};
  std::atomic<int> resets{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      const int fd = Connect(port);
      if (fd < 0) {
        resets.fetch_add(1);
        return;
      }
      std::string got;
      bool reset = false;
      if (SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") &&
          ReadUntil(fd, R"({"status":"ok"})", absl::Seconds(10), &got, &reset)) {
        answered.fetch_add(1);
      }
      if (reset) resets.fetch_add(1);
      close(fd);
    });
  }
  go.store(true);
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(resets.load(), 0);
  EXPECT_EQ(answered.load(), kClients);
}

TEST_F(HttpHostileTest, PipelinedRequestsGetTheirAnswersInOrder) {
  Start();
  const int fd = Connect(server_->http_port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Post("/v1/completions", R"({"prompt": "The", "max_tokens": 3})") +
                              "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string got;
  EXPECT_TRUE(ReadUntil(fd, R"({"status":"ok"})", absl::Seconds(10), &got)) << got;
  const size_t completion = got.find("text_completion");
  const size_t health = got.find(R"({"status":"ok"})");
  EXPECT_NE(completion, std::string::npos) << got;
  EXPECT_LT(completion, health);
  close(fd);
}

TEST_F(HttpHostileTest, SseCutBySigtermEndsWithAnErrorEventAndDone) {
  Start({"--drain_grace_seconds", "0.3"});
  const int fd = Connect(server_->http_port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Post("/v1/completions", R"({"prompt": "The", "max_tokens": 4096,
                                 "ignore_eos": true, "stream": true})")));
  std::string got;
  ASSERT_TRUE(ReadUntil(fd, "text_completion", absl::Seconds(10), &got));
  server_->SendSignal(SIGTERM);
  EXPECT_TRUE(ReadUntil(fd, "data: [DONE]\n\n\r\n0\r\n\r\n", absl::Seconds(4), &got))
      << got.substr(got.size() > 400 ? got.size() - 400 : 0);
  EXPECT_TRUE(absl::StrContains(got, R"("type":"unavailable_error")")) << got.substr(0, 400);
  EXPECT_EQ(server_->WaitForExit(TimeLimit(3.0)), 0);
  close(fd);
}

TEST_F(HttpHostileTest, PortsAreExclusive) {
  Start();
  testing::ExpectRefusedStart(
      {"--device", "cpu", "--models", kLmDir, "--http_port", std::to_string(server_->http_port())},
      1, "Address already in use");
  testing::ExpectRefusedStart(
      {"--device", "cpu", "--models", kLmDir, "--grpc_port", std::to_string(server_->grpc_port())},
      1, "address in use");
  testing::ExpectRefusedStart(
      {"--device", "cpu", "--models", kLmDir, "--grpc_port", "18123", "--http_port", "18123"}, 2,
      "--grpc_port and --http_port must differ");
  // The first server still serves.
  EXPECT_GT(Timed("GET", "/healthz"), 0);
}

}  // namespace
}  // namespace abcd
