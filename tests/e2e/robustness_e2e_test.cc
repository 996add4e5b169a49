// abcd-server against hostile and clumsy clients (issue 19), the real binary over gRPC and HTTP:
// huge prompts are refused before any work, a maximal translation batch does not hold a one-word
// translation or SIGTERM, and streams stalled on flow control then cancelled all complete.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::TimeLimit;
using testing::UnderSanitizers;
using Clock = std::chrono::steady_clock;

using testing::kEnDeDir;
using testing::kLmDir;
using testing::kMtDir;

// Resident set of `pid` in bytes (0 if unreadable).
int64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 6 - 3)), &kb)) {
        return 0;
      }
      return kb * 1024;
    }
  }
  return 0;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

class RobustnessTest : public testing::ServerTest {
 protected:
  void Start(const std::string& models, std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"--device", "cpu", "--models", models});
    ServerTest::Start(std::move(args), /*read_timeout_s=*/60);
    if (HasFatalFailure()) return;
    channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = abcd::v1::Generator::NewStub(channel_);
  }

  // The value of one exposition sample (exact name incl. labels), or -1.
  double Metric(const std::string& sample) {
    return testing::MetricSample(*http_, sample, /*absent=*/0);  // a counter not yet incremented
  }

  bool EventuallyIdle(double seconds = 10) {
    const auto start = Clock::now();
    while (Seconds(start) < seconds) {
      if (Metric("abcd_running_sequences") == 0 && Metric("abcd_waiting_requests") == 0 &&
          Metric("abcd_state_bytes_in_use") == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
};

// Issue 19 item 2: a 4 MB gRPC prompt used to cost ~946 MB and 5 s of CPU in the tokenizer.
TEST_F(RobustnessTest, HugePromptsAreRefusedBeforeTokenizing) {
  Start(std::string(kLmDir) + "," + kMtDir, {"--max_message_bytes", "8388608"});
  // Warm up the paths a first request touches, then take the baseline.
  abcd::v1::GenerateRequest small;
  small.set_prompt("hello");
  small.set_max_tokens(2);
  {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, small);
    abcd::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  const int64_t before = RssBytes(server_->pid());
  ASSERT_GT(before, 0);
  const std::string huge(4 << 20, 'x');
  std::atomic<int> refused{0};
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext context;
      grpc::Status status;
      if (i % 2 == 0) {
        abcd::v1::GenerateRequest request;
        request.set_prompt(huge);
        auto reader = stub_->Generate(&context, request);
        abcd::v1::GenerateResponse response;
        while (reader->Read(&response)) {
        }
        status = reader->Finish();
        if (status.error_message().find("prompt is 4194304 bytes") != std::string::npos) ++refused;
      } else {
        abcd::v1::TranslateRequest request;
        request.set_text(huge);
        abcd::v1::TranslateResponse response;
        status = stub_->Translate(&context, request, &response);
        if (status.error_message().find("text is 4194304 bytes") != std::string::npos) ++refused;
      }
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = Seconds(start);
  const int64_t right_after = RssBytes(server_->pid());
  // The server returns freed heap pages once a second (malloc_trim): what stays is the growth.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const int64_t after = RssBytes(server_->pid());
  EXPECT_EQ(refused.load(), 8);
  if (!UnderSanitizers()) {
    EXPECT_LT(right_after - before, int64_t{50} << 20) << "RSS " << before << " -> " << right_after;
    EXPECT_LT(after - before, int64_t{16} << 20) << "RSS " << before << " -> " << after;
  }
  EXPECT_LT(seconds, TimeLimit(5.0));
  std::printf(
      "8 x 4 MB prompts refused in %.2f s, RSS %.1f MB -> %.1f MB at once, %.1f MB 1.5 s later\n",
      seconds, before / 1048576.0, right_after / 1048576.0, after / 1048576.0);
  EXPECT_EQ(Metric("abcd_requests_total{kind=\"generate\",status=\"invalid_argument\"}"), 4);
  EXPECT_EQ(Metric("abcd_requests_total{kind=\"translate\",status=\"invalid_argument\"}"), 4);
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(10), 0);
}

// Issue 19 item 3: sources were encoded on the engine thread in one go, so a batch of long
// sources held every other translation and SIGTERM for as long as encoding them all took.
TEST_F(RobustnessTest, MaximalTranslationBatchHoldsNeitherAShortTranslationNorSigterm) {
  constexpr double kGrace = 1.0;
  // The largest batch the flags allow: 64 texts of (nearly) max_source_tokens (512 with eos).
  Start(kEnDeDir,
        {"--drain_grace_seconds", absl::StrCat(kGrace), "--max_batch_source_tokens", "32768"});
  auto tokenizer = Tokenizer::Load(std::string(kEnDeDir) + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::string text;
  const std::string sentence = "The house is small, but the garden behind it is very green. ";
  while (true) {
    auto ids = (*tokenizer)->Encode(text + sentence);
    ASSERT_TRUE(ids.ok());
    if (ids->size() + 1 > 512) break;
    text += sentence;
  }
  nlohmann::json batch = {{"texts", std::vector<std::string>(64, text)}, {"max_tokens", 32}};
  std::atomic<bool> batch_done{false};
  std::thread batch_client([&] {
    httplib::Client client("127.0.0.1", server_->http_port());
    client.set_read_timeout(120, 0);
    client.Post("/v1/translate", batch.dump(), "application/json");
    batch_done = true;
  });
  // Wait until the batch is in the engine.
  const auto wait_start = Clock::now();
  while (Metric("abcd_running_sequences") <= 0 && Seconds(wait_start) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(Metric("abcd_running_sequences"), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  abcd::v1::TranslateRequest one_word;
  one_word.set_text("Hello");
  one_word.set_max_tokens(8);
  abcd::v1::TranslateResponse response;
  grpc::ClientContext context;
  const auto start = Clock::now();
  const grpc::Status status = stub_->Translate(&context, one_word, &response);
  const double seconds = Seconds(start);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(seconds, TimeLimit(2.0));
  EXPECT_FALSE(batch_done.load()) << "the batch must still run for this test to mean anything";
  std::printf("one-word translation during a 64 x 511-token batch: %.2f s (\"%s\")\n", seconds,
              response.translation().c_str());

  const auto term = Clock::now();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(kGrace + TimeLimit(5)), 0) << server_->Log();
  const double exit_seconds = Seconds(term);
  EXPECT_LT(exit_seconds, kGrace + TimeLimit(2));
  std::printf("SIGTERM with the batch running: exit in %.2f s (grace %.1f s)\n", exit_seconds,
              kGrace);
  if (std::getenv("ABCD_E2E_LOG") != nullptr) std::printf("%s\n", server_->Log().c_str());
  batch_client.join();
}

// Issue 19: /v1/translate batches go through Executor::EnqueueBatch, so their total of source
// tokens is limited (--max_batch_source_tokens) and a batch over it is refused as a whole.
TEST_F(RobustnessTest, TranslationBatchOverItsTokenTotalIsRefused) {
  Start(kEnDeDir, {"--max_batch_source_tokens", "64"});
  const std::string text = "The house is small, but the garden behind it is very green.";
  nlohmann::json batch = {{"texts", std::vector<std::string>(8, text)}, {"max_tokens", 4}};
  auto refused = http_->Post("/v1/translate", batch.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("texts"), std::string::npos) << refused->body;
  nlohmann::json small = {{"texts", std::vector<std::string>(2, text)}, {"max_tokens", 4}};
  auto accepted = http_->Post("/v1/translate", small.dump(), "application/json");
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->status, 200) << accepted->body;
  EXPECT_TRUE(EventuallyIdle());
}

// Issue 19 item 4b: streams whose writes stall on flow control (the client never reads) and
// are then cancelled with several events queued must each complete, be counted, free their
// state, and leave grpc::Server::Shutdown nothing to wait for.
TEST_F(RobustnessTest, StalledStreamsThatCancelAllComplete) {
  Start(kLmDir, {"--max_tokens_limit", "16384", "--drain_grace_seconds", "1"});
  // A small stream window and no BDP probing: a few hundred bytes fill it.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64);
  auto channel =
      grpc::CreateCustomChannel(server_->grpc_target(), grpc::InsecureChannelCredentials(), args);
  auto stub = abcd::v1::Generator::NewStub(channel);
  constexpr int kStreams = 300;
  constexpr int kRounds = 2;
  for (int round = 0; round < kRounds; ++round) {
    grpc::CompletionQueue cq;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<grpc::ClientAsyncReader<abcd::v1::GenerateResponse>>> readers;
    abcd::v1::GenerateRequest request;
    request.set_prompt("stall");
    request.set_max_tokens(16384);
    request.mutable_sampling()->set_temperature(1.0f);
    for (int i = 0; i < kStreams; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      readers.push_back(stub->AsyncGenerate(contexts.back().get(), request, &cq,
                                            reinterpret_cast<void*>(static_cast<intptr_t>(i))));
    }
    // Let the streams run into their flow-control windows (nothing is ever read). The
    // completion queue is polled meanwhile: that is what moves the client's transport.
    void* tag;
    bool ok;
    int started = 0;
    const auto run_until = std::chrono::system_clock::now() + std::chrono::milliseconds(1500);
    while (cq.AsyncNext(&tag, &ok, run_until) == grpc::CompletionQueue::GOT_EVENT) {
      started += ok;
    }
    EXPECT_EQ(started, kStreams);
    for (auto& context : contexts) context->TryCancel();
    std::vector<grpc::Status> statuses(kStreams);
    for (int i = 0; i < kStreams; ++i) {
      readers[i]->Finish(&statuses[i],
                         reinterpret_cast<void*>(static_cast<intptr_t>(kStreams + i)));
    }
    int finished = 0;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(20);
    while (finished < kStreams) {
      const auto next = cq.AsyncNext(&tag, &ok, deadline);
      ASSERT_EQ(next, grpc::CompletionQueue::GOT_EVENT) << "round " << round;
      if (reinterpret_cast<intptr_t>(tag) >= kStreams) ++finished;
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    // Every call completed on the server too: counted once (cancelled, or refused when the
    // waiting queue was full behind the state budget), state freed.
    const auto counted = [&] {
      return Metric("abcd_requests_total{kind=\"generate\",status=\"cancelled\"}") +
             Metric("abcd_requests_total{kind=\"generate\",status=\"resource_exhausted\"}");
    };
    const auto start = Clock::now();
    while (counted() < kStreams * (round + 1) && Seconds(start) < 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(counted(), kStreams * (round + 1)) << "round " << round;
    EXPECT_TRUE(EventuallyIdle()) << "round " << round;
  }
  const auto term = Clock::now();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(10), 0) << server_->Log();
  EXPECT_LT(Seconds(term), 1 + 2.0);
}

// Issue 19 items 12 and 13: a string field that is not UTF-8 is a client error naming the field
// (it used to fail in protobuf's parser: UNIMPLEMENTED, no message, an unstructured log line,
// not counted), and error messages echo at most 256 bytes of a client's value.
TEST_F(RobustnessTest, InvalidUtf8IsNamedAndEchoesAreTruncated) {
  Start(std::string(kLmDir) + "," + kMtDir);
  const std::string bad = "caf\xc3\x28 au lait";
  auto generate = [&](const abcd::v1::GenerateRequest& request) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  };
  abcd::v1::GenerateRequest request;
  request.set_prompt(bad);
  grpc::Status status = generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), "prompt is not valid UTF-8");
  request.set_prompt("fine");
  request.add_stop("ok");
  request.add_stop(bad);
  status = generate(request);
  EXPECT_EQ(status.error_message(), "stop[1] is not valid UTF-8");
  request.clear_stop();
  request.set_model(bad);
  status = generate(request);
  EXPECT_EQ(status.error_message(), "model is not valid UTF-8");
  abcd::v1::TranslateRequest translate;
  translate.set_text(bad);
  abcd::v1::TranslateResponse response;
  grpc::ClientContext context;
  status = stub_->Translate(&context, translate, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), "text is not valid UTF-8");
  EXPECT_EQ(Metric("abcd_requests_total{kind=\"generate\",status=\"invalid_argument\"}"), 3);
  EXPECT_EQ(Metric("abcd_requests_total{kind=\"translate\",status=\"invalid_argument\"}"), 1);

  // An 8 KB model name is echoed truncated (it used to overflow gRPC's metadata limit).
  request.set_model(std::string(8192, 'm'));
  status = generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_LT(status.error_message().size(), 400u) << status.error_message();
  EXPECT_NE(status.error_message().find("... (8192 bytes)"), std::string::npos)
      << status.error_message();
  server_->SendSignal(SIGTERM);
  EXPECT_EQ(server_->WaitForExit(10), 0);
  const std::string log = server_->Log();
  EXPECT_EQ(log.find("libprotobuf"), std::string::npos) << log;
  size_t events = 0;
  for (size_t at = log.find("event=bad_request"); at != std::string::npos;
       at = log.find("event=bad_request", at + 1)) {
    ++events;
  }
  EXPECT_EQ(events, 4u) << log;
}

// Issue 19 item 17: the same model directory twice is refused at start-up, naming it.
TEST(RobustnessStartup, SameModelDirectoryTwiceIsRefused) {
  testing::ExpectRefusedStart(
      {"--device", "cpu", "--models", std::string(kLmDir) + "," + kLmDir + "/"}, 2, "twice");
}

}  // namespace
}  // namespace abcd
