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

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
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

// The templates of the issue, from one template file whose first message's content picks the
// attack (a template comes with every downloaded model, so this is input): `1 ** 10**15`,
// `replace` of a 4 MB string by itself, list doubling, `[s] * N`, `tojson` and `join` of a
// 4 GB list, a 4 MB string concatenated 100,000 times, and the namespace append over every
// message. Each is a fast 400 naming messages (or, for the computable ones, a 200) while
// /healthz and a completion on other connections keep answering, and the server's RSS stays
// within the render's 64 MiB memory budget per render worker.
constexpr char kHostileTemplate[] =
    "{%- set a = messages[0].content -%}"
    "{%- if a == 'pow' -%}{{ 1 ** 10**15 }}{{ 2 ** 62 }}"
    "{%- elif a == 'replace' -%}{% set s = 'a' * 4000000 %}{{ s.replace('a', s) }}"
    "{%- elif a == 'double' -%}{% set ns = namespace(l=['x' * 1000]) %}"
    "{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"
    "{%- elif a == 'repeat' -%}{% set s = 'a' * 4000000 %}{{ [s] * 100000 }}"
    "{%- elif a == 'tojson' -%}{% set s = 'a' * 4000000 %}{{ ([s] * 1000) | tojson }}"
    "{%- elif a == 'join' -%}{% set s = 'a' * 4000000 %}{{ ([s] * 1000) | join(',') }}"
    "{%- elif a == 'concat' -%}{% set s = 'a' * 4000000 %}"
    "{% for i in range(100000) %}{% set t = s ~ i %}{% endfor %}"
    "{%- elif a == 'ns' -%}{% set ns = namespace(roles=[]) %}"
    "{% for m in messages %}{% set ns.roles = ns.roles + [m.role] %}{% endfor %}"
    "{{ ns.roles | length }}"
    "{%- else -%}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"
    "{%- endif -%}";

int64_t RssKb(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, field)) return std::atoll(line.c_str() + std::strlen(field));
  }
  return -1;
}

// `count` messages, the first with content `first`, the rest empty user messages.
std::string Attack(const std::string& first, int count = 1) {
  json messages = json::array({{{"role", "user"}, {"content", first}}});
  for (int i = 1; i < count; ++i) messages.push_back({{"role", "user"}, {"content", ""}});
  return json{{"messages", messages}, {"max_tokens", 1}}.dump();
}

class HostileTemplateTest : public testing::ServerTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("abcd-hostile-template-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string file = (dir_ / "hostile.jinja").string();
    std::ofstream(file) << kHostileTemplate;
    // 16,384: the namespace append's 14,000 messages reach the template (with the default
    // 4,096 they are refused by count, before it).
    Start({"--device", "cpu", "--models", testing::kTrainedLmDir, "--chat_template",
           "abc-lm=" + file, "--max_prompt_tokens", "16384"});
  }
  void TearDown() override {
    http_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Runs `attack` while another thread probes /healthz and a one-token completion, each on a
  // new connection, every 20 ms; the slowest probe in seconds.
  double WorstProbeDuring(const std::function<void()>& attack) {
    std::atomic<bool> done{false};
    double worst = 0;
    int probes = 0;
    std::thread prober([&] {
      while (!done.load()) {
        httplib::Client http("127.0.0.1", server_->http_port());
        http.set_read_timeout(30, 0);
        const auto start = Clock::now();
        const auto health = http.Get("/healthz");
        const auto completion = http.Post(
            "/v1/completions", R"({"prompt": "The", "max_tokens": 1})", "application/json");
        EXPECT_TRUE(health && health->status == 200);
        EXPECT_TRUE(completion && completion->status == 200);
        worst = std::max(worst, Seconds(start));
        ++probes;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    attack();
    done = true;
    prober.join();
    EXPECT_GT(probes, 0);
    return worst;
  }

  std::filesystem::path dir_;
};

TEST_F(HostileTemplateTest, IssueTemplatesAreRefusedWhileProbesAnswer) {
  struct Case {
    std::string attack;
    int status;
    std::string message;  // in the 400's message
  };
  const std::vector<Case> cases = {
      {"pow", 200, ""},
      {"replace", 400, "memory budget"},
      {"double", 400, "budget"},
      {"repeat", 400, "memory budget"},
      {"tojson", 400, "memory budget"},
      {"join", 400, "memory budget"},
      {"concat", 400, "budget"},
  };
  const int64_t rss_before = RssKb(server_->pid(), "VmRSS:");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.attack);
    double took = 0;
    const double worst = WorstProbeDuring([&] {
      httplib::Client http("127.0.0.1", server_->http_port());
      http.set_read_timeout(60, 0);
      const auto start = Clock::now();
      // Two at once: the issue's two renders that took the API port down.
      std::thread second(
          [&] { http.Post("/v1/chat/completions", Attack(c.attack), "application/json"); });
      httplib::Client other("127.0.0.1", server_->http_port());
      other.set_read_timeout(60, 0);
      const auto result = other.Post("/v1/chat/completions", Attack(c.attack), "application/json");
      second.join();
      took = Seconds(start);
      ASSERT_TRUE(result) << server_->Log();
      EXPECT_EQ(result->status, c.status) << result->body.substr(0, 300);
      if (c.status == 400) {
        const json error = json::parse(result->body)["error"];
        EXPECT_EQ(error["param"], "messages") << error;
        EXPECT_TRUE(absl::StrContains(error["message"].get<std::string>(), c.message)) << error;
      }
    });
    std::cout << c.attack << ": answered in " << took << " s, slowest probe " << worst * 1000
              << " ms, RSS " << RssKb(server_->pid(), "VmRSS:") / 1024 << " MiB (peak "
              << RssKb(server_->pid(), "VmHWM:") / 1024 << " MiB)\n";
    EXPECT_LT(took, testing::TimeLimit(5.0));
    EXPECT_LT(worst, testing::TimeLimit(0.5));
  }
  // Two renders at once, each within its 64 MiB memory budget (plus what the parsed list of the
  // renders' strings shares): the peak grows by less than 256 MiB.
  if (!testing::UnderSanitizers()) {
    EXPECT_LT(RssKb(server_->pid(), "VmHWM:") - rss_before, 256 * 1024);
  }
  ExpectServing();
}

// The namespace append over 14,000 messages: linear (in place), so four at once render in well
// under a second each, probes answer meanwhile, and SIGTERM with more queued ends the process
// within the grace.
TEST_F(HostileTemplateTest, NamespaceAppendOverFourteenThousandMessagesThenSigterm) {
  const std::string body = Attack("ns", 14000);
  double took = 0;
  const double worst = WorstProbeDuring([&] {
    const auto start = Clock::now();
    std::vector<std::thread> clients;
    std::vector<int> statuses(4, 0);
    for (int i = 0; i < 4; ++i) {
      clients.emplace_back([&, i] {
        httplib::Client http("127.0.0.1", server_->http_port());
        http.set_read_timeout(60, 0);
        const auto result = http.Post("/v1/chat/completions", body, "application/json");
        statuses[static_cast<size_t>(i)] = result ? result->status : -1;
      });
    }
    for (std::thread& t : clients) t.join();
    took = Seconds(start);
    for (int status : statuses) EXPECT_EQ(status, 200);
  });
  std::cout << "4 x 14,000-message namespace append: " << took << " s, slowest probe "
            << worst * 1000 << " ms\n";
  EXPECT_LT(took, testing::TimeLimit(10.0));
  EXPECT_LT(worst, testing::TimeLimit(0.5));
  // SIGTERM while eight more are rendering or queued: the process exits within the grace.
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      httplib::Client http("127.0.0.1", server_->http_port());
      http.set_read_timeout(60, 0);
      http.Post("/v1/chat/completions", body, "application/json");
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = Clock::now();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(testing::TimeLimit(10)), 0) << server_->Log();
  std::cout << "SIGTERM to exit: " << Seconds(start) << " s\n";
  EXPECT_LT(Seconds(start), testing::TimeLimit(5.0));
  for (std::thread& t : clients) t.join();
}

}  // namespace
}  // namespace abcd
