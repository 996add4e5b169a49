// The e2e suites' shared start-up: the real abcd-server, an HTTP client of it for every test, a
// /metrics sample and the "still serving" probe the hostile-input tests run after each attack.
// Every e2e start-up of abcd-server goes through StartServer (ServerProcess is not constructed
// elsewhere). One server per test suite:
//
//   class MyTest : public testing::ServerSuite<MyTest> {
//    public:
//     static std::vector<std::string> ServerArgs() { return {"--models", kTrainedLmDir}; }
//   };
//
// (SetUpTestSuite starts the server with those flags; a suite that must prepare files first
// defines its own static SetUpTestSuite and calls Start(args) from it). One server per test, of
// the test's flags: derive from ServerTest and call Start(args) in SetUp or in the test. A
// one-off server (a second one beside a suite's, one that may or may not start): StartServer,
// then ASSERT_TRUE(Started(*server)). A start-up that must fail: ExpectRefusedStart.
//
// Thread-safety: test-only; the gtest thread.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"

namespace abcd::testing {

// Starts abcd-server with `args` (ServerProcess adds the loopback and ephemeral-port flags) and
// waits until it serves or exits: started() says which, Log() what it wrote.
inline std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> args) {
  return std::make_unique<ServerProcess>(ServerBinary(), std::move(args));
}

// For ASSERT_TRUE(Started(server)): success when `server` serves, else a failure with its log.
inline ::testing::AssertionResult Started(const ServerProcess& server) {
  if (server.started()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "abcd-server did not start:\n" << server.Log();
}

// A client of `server`'s HTTP port that waits up to `read_timeout_s` for an answer.
inline std::unique_ptr<httplib::Client> HttpClient(const ServerProcess& server,
                                                   int read_timeout_s = 30) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", server.http_port());
  client->set_read_timeout(read_timeout_s, 0);
  return client;
}

// Expects the server to still serve: /healthz 200 and a one-token completion 200 (the default
// language model), with the server's log on failure.
inline void ExpectServing(httplib::Client& http, const ServerProcess& server) {
  const auto health = http.Get("/healthz");
  ASSERT_TRUE(health) << server.Log();
  EXPECT_EQ(health->status, 200);
  const auto completion =
      http.Post("/v1/completions", R"({"prompt": "The", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(completion) << server.Log();
  EXPECT_EQ(completion->status, 200) << completion->body;
}

// The exit code of a refused start-up, besides a code itself: any but 0, or not checked (the
// refusal's log line is the contract; the process is not waited for).
inline constexpr int kNonZeroExit = -100;
inline constexpr int kAnyExit = -101;

// Expects `server` (from StartServer) to have been refused: not started, exited with `exit_code`
// (or kNonZeroExit / kAnyExit) within TimeLimit(`exit_timeout_s`), and logged `message`. Returns
// the log, for further lines a test expects.
inline std::string ExpectRefused(ServerProcess& server, int exit_code, const std::string& message,
                                 double exit_timeout_s = 10) {
  EXPECT_FALSE(server.started());
  if (exit_code != kAnyExit) {
    const int code = server.WaitForExit(TimeLimit(exit_timeout_s));
    if (exit_code == kNonZeroExit) {
      EXPECT_NE(code, 0) << server.Log();
    } else {
      EXPECT_EQ(code, exit_code) << server.Log();
    }
  }
  const std::string log = server.Log();
  EXPECT_NE(log.find(message), std::string::npos) << log;
  return log;
}

// A start-up that must be refused: abcd-server with `args` does not start, exits with
// `exit_code` and logs `message` (ExpectRefused). Returns the log.
inline std::string ExpectRefusedStart(std::vector<std::string> args, int exit_code,
                                      const std::string& message, double exit_timeout_s = 10) {
  return ExpectRefused(*StartServer(std::move(args)), exit_code, message, exit_timeout_s);
}

template <typename Suite>
class ServerSuite : public ::testing::Test {
 public:
  static void SetUpTestSuite() { Start(Suite::ServerArgs()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

 protected:
  static void Start(std::vector<std::string> args) {
    delete server_;
    server_ = StartServer(std::move(args)).release();
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(Started(*server_));
    http_ = HttpClient(*server_);
  }

  void ExpectServing() { testing::ExpectServing(*http_, *server_); }
  // A sample of /metrics (MetricSample): `absent` when the server has no such line yet.
  double Metric(const std::string& sample, double absent = -1) {
    return MetricSample(*http_, sample, absent);
  }

  static inline ServerProcess* server_ = nullptr;
  std::unique_ptr<httplib::Client> http_;
};

class ServerTest : public ::testing::Test {
 protected:
  // Starts the server (stopping one this test started before) and connects http_; a failure to
  // start fails the test with the server's log.
  void Start(std::vector<std::string> args, int read_timeout_s = 30) {
    http_.reset();
    server_.reset();
    server_ = StartServer(std::move(args));
    ASSERT_TRUE(Started(*server_));
    http_ = HttpClient(*server_, read_timeout_s);
  }

  void ExpectServing() { testing::ExpectServing(*http_, *server_); }
  double Metric(const std::string& sample, double absent = -1) {
    return MetricSample(*http_, sample, absent);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace abcd::testing
