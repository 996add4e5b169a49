// Issue 44: a chat template's render never holds an HTTP I/O thread, stops when its client
// leaves and does not keep SIGTERM waiting. The real binary, with a template whose render is
// driven to its work budget by the client's own messages (4,000 empty ones: about 0.7 s of CPU
// each before the 400): while renders queue, /healthz and a completion answer at once; a render
// whose client disconnected stops at its next poll; SIGTERM ends the process within the grace.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// 2,000 passes over the messages: with 4,000 of them the render reaches its work budget.
constexpr char kHeavyTemplate[] =
    "{% for i in range(2000) %}{% for m in messages %}{% endfor %}{% endfor %}"
    "{{ messages[0].content }}";

std::string Messages(int count) {
  json messages = json::array();
  for (int i = 0; i < count; ++i) messages.push_back({{"role", "user"}, {"content", ""}});
  return json{{"messages", messages}, {"max_tokens", 1}}.dump();
}

class ChatRenderTest : public testing::ServerTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("abcd-chat-render-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string file = (dir_ / "heavy.jinja").string();
    std::ofstream(file) << kHeavyTemplate;
    Start({"--device", "cpu", "--models", testing::kTrainedLmDir, "--chat_template",
           "abc-lm=" + file});
  }
  void TearDown() override {
    http_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Starts `n` heavy chat requests on their own threads; each records its HTTP status.
  void StartHeavy(int n, std::vector<int>* statuses) {
    statuses->assign(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      clients_.emplace_back([this, i, statuses] {
        httplib::Client http("127.0.0.1", server_->http_port());
        http.set_read_timeout(60, 0);
        const auto result = http.Post("/v1/chat/completions", Messages(4000), "application/json");
        (*statuses)[static_cast<size_t>(i)] = result ? result->status : -1;
      });
    }
  }
  void JoinHeavy() {
    for (std::thread& t : clients_) t.join();
    clients_.clear();
  }

  std::filesystem::path dir_;
  std::vector<std::thread> clients_;
};

TEST_F(ChatRenderTest, RendersAtTheirBudgetHoldNeitherProbesNorCompletions) {
  std::vector<int> statuses;
  StartHeavy(4, &statuses);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  httplib::Client http("127.0.0.1", server_->http_port());
  http.set_read_timeout(30, 0);
  double worst = 0;
  for (int round = 0; round < 5; ++round) {
    auto start = Clock::now();
    const auto health = http.Get("/healthz");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    const auto completion =
        http.Post("/v1/completions", R"({"prompt": "The", "max_tokens": 1})", "application/json");
    ASSERT_TRUE(completion);
    EXPECT_EQ(completion->status, 200) << completion->body;
    worst = std::max(worst, Seconds(start));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Measured 5-90 ms on the 2-core dev machine; a render on an I/O thread held them ~0.7 s.
  EXPECT_LT(worst, testing::TimeLimit(0.5));
  JoinHeavy();
  for (int status : statuses) EXPECT_EQ(status, 400);  // over the work budget
}

TEST_F(ChatRenderTest, ARenderWhoseClientLeftStops) {
  // Five renders whose clients leave at once, then one small request: it must not wait behind
  // ~3.5 s of abandoned renders.
  const std::string body = Messages(4000);
  for (int i = 0; i < 5; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const std::string request = absl::StrCat(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    close(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  httplib::Client http("127.0.0.1", server_->http_port());
  http.set_read_timeout(30, 0);
  const auto start = Clock::now();
  const auto small = http.Post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})",
                               "application/json");
  ASSERT_TRUE(small) << server_->Log();
  EXPECT_EQ(small->status, 200) << small->body;
  EXPECT_LT(Seconds(start), testing::TimeLimit(1.5));
}

TEST_F(ChatRenderTest, SigtermEndsRendersWithinTheGrace) {
  std::vector<int> statuses;
  StartHeavy(4, &statuses);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto start = Clock::now();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(testing::TimeLimit(10)), 0) << server_->Log();
  EXPECT_LT(Seconds(start), testing::TimeLimit(5.0));
  JoinHeavy();
  for (int status : statuses) EXPECT_TRUE(status == 503 || status == 400 || status == -1) << status;
}

}  // namespace
}  // namespace abcd
