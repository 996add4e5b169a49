// Issue 44 on the real binary: 1,024 connections (the API port's cap) that each sent part of a
// header line and drip one more byte now and then, reconnecting whenever the server closes
// them, must not keep new clients out: /healthz and a completion on fresh connections answer
// within a second, each having closed the connection whose header began first
// (abcd_http_connections_evicted_total). Before, every new connection got 503.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

constexpr int kDrippers = 1024;  // --http_max_connections' default
constexpr char kPartialHeader[] = "GET /healthz HTTP/1.1\r\nX-Drip: ";

// A loopback connection that sent kPartialHeader; -1 when it could not connect.
int OpenDripper(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      send(fd, kPartialHeader, sizeof(kPartialHeader) - 1, MSG_NOSIGNAL) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reopens every dripper the server closed (or answered); returns how many.
int RefillDrippers(int port, std::vector<int>* fds) {
  std::vector<pollfd> polls;
  for (int fd : *fds) polls.push_back({fd, POLLIN, 0});
  if (poll(polls.data(), polls.size(), 0) <= 0) return 0;
  int reopened = 0;
  for (size_t i = 0; i < polls.size(); ++i) {
    if (polls[i].revents == 0) continue;
    char scratch[4096];
    if (recv((*fds)[i], scratch, sizeof(scratch), MSG_DONTWAIT) > 0) continue;  // an answer
    close((*fds)[i]);
    (*fds)[i] = OpenDripper(port);
    ++reopened;
  }
  return reopened;
}

class PartialHeaderFloodTest : public testing::ServerTest {};

TEST_F(PartialHeaderFloodTest, ThousandDrippersKeepNeitherProbesNorCompletionsOut) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GE(files.rlim_cur, rlim_t{2 * kDrippers + 256}) << "needs ulimit -n >= 2304";
  Start({"--device", "cpu", "--models", testing::kLmDir});
  if (HasFatalFailure()) return;
  const int port = server_->http_port();
  std::vector<int> drippers;
  for (int i = 0; i < kDrippers; ++i) {
    drippers.push_back(OpenDripper(port));
    ASSERT_GE(drippers.back(), 0) << i;
  }
  auto timed = [port](const std::string& method, const std::string& path, const std::string& body) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    const absl::Time start = absl::Now();
    httplib::Result result = method == "GET" ? client.Get(path.c_str())
                                             : client.Post(path.c_str(), body, "application/json");
    if (!result || result->status != 200) return -1.0;
    return absl::ToDoubleSeconds(absl::Now() - start);
  };
  int reopened = 0;
  // Back at the cap before each probe: the dripper the last probe made room with reopens, and
  // every header has begun on the server.
  auto at_the_cap = [&] {
    for (int fd : drippers) send(fd, "a", 1, MSG_NOSIGNAL);  // still dripping
    reopened += RefillDrippers(port, &drippers);
    absl::SleepFor(absl::Milliseconds(200));
  };
  for (int round = 0; round < 3; ++round) {
    at_the_cap();
    const double health = timed("GET", "/healthz", "");
    at_the_cap();
    const double completion =
        timed("POST", "/v1/completions", R"({"prompt": "The", "max_tokens": 4, "temperature": 0})");
    EXPECT_GT(health, 0) << round;
    EXPECT_LT(health, testing::TimeLimit(1.0)) << round;
    EXPECT_GT(completion, 0) << round;
    EXPECT_LT(completion, testing::TimeLimit(1.0)) << round;
    std::cout << "round " << round << ": /healthz " << health << " s, completion " << completion
              << " s\n";
  }
  for (int fd : drippers) {
    if (fd >= 0) close(fd);
  }
  const double evicted = Metric("abcd_http_connections_evicted_total");
  EXPECT_GE(evicted, 6) << "each probe connection closed a dripper";
  EXPECT_GE(reopened, 5);
  std::cout << "drippers reopened: " << reopened << ", connections evicted: " << evicted << "\n";
}

}  // namespace
}  // namespace abcd
