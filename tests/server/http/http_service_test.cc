// HTTP/JSON frontend: the real HttpService on 127.0.0.1 (ephemeral port) over fake executors
// (tests/testing/fake_executor.h) that emit scripted events from their own threads, driven with
// httplib::Client and raw sockets. Covers completions (JSON and SSE streaming), cancel on client
// disconnect, translate (single and batch), the model list, probes, metrics passthrough, the error
// mapping and the bad-input table.
#include "server/http/http_service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/core/served_models.h"
#include "server/http/request_parser.h"
#include "tests/testing/fake_executor.h"

namespace abcd {
namespace {

using nlohmann::json;

using testing::FakeExecutor;

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(3)) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// The `data:` payloads of a server-sent-events body, in order; fails on other framing.
std::vector<std::string> SsePayloads(const std::string& body) {
  std::vector<std::string> payloads;
  EXPECT_TRUE(absl::EndsWith(body, "\n\n")) << body;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    payloads.emplace_back(event.substr(6));
  }
  return payloads;
}

// A raw client socket, for disconnecting mid-response.
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
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool SendPost(const std::string& path, const std::string& body) {
    return SendRaw(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ",
                                "application/json\r\nContent-Length: ", body.size(), "\r\n\r\n",
                                body));
  }
  bool SendRaw(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  const std::string& received() const { return received_; }
  // Reads until `needle` was received; false on timeout or EOF.
  bool ReadUntil(const std::string& needle, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (received_.find(needle) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      const int ms = static_cast<int>(absl::ToInt64Milliseconds(give_up - absl::Now()));
      if (ms <= 0 || poll(&p, 1, ms) <= 0) return false;
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return false;
      received_.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string received_;
};

constexpr char kLm[] = "abc-lm-test";
constexpr char kMt[] = "abc-mt-test";
constexpr size_t kTestBodyLimit = 4096;

class HttpServiceTest : public testing::GoldenModelSuite {
 protected:
  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    models_ = std::make_unique<ServedModels>();
    auto lm = std::make_unique<ServedModel>();
    lm->name = kLm;
    lm->kind = ModelKind::kLanguageModel;
    lm->state_bytes_per_sequence = 4096;
    lm->executor = std::make_unique<FakeExecutor>(*model_);
    lm_ = static_cast<FakeExecutor*>(lm->executor.get());
    models_->Add(std::move(lm));
    auto mt = std::make_unique<ServedModel>();
    mt->name = kMt;
    mt->kind = ModelKind::kTranslation;
    mt->state_bytes_per_sequence = 8192;
    mt->executor = std::make_unique<FakeExecutor>(*model_);
    mt_ = static_cast<FakeExecutor*>(mt->executor.get());
    models_->Add(std::move(mt));
    models_->set_ready(true);

    http::HttpHooks hooks;
    hooks.render_metrics = [] { return std::string("# TYPE abcd_up gauge\nabcd_up 1\n"); };
    hooks.count_request = [this](absl::string_view kind, absl::string_view status) {
      std::lock_guard<std::mutex> lock(counts_mu_);
      ++counts_[absl::StrCat(kind, "/", status)];
    };
    http::HttpOptions options;
    options.max_body_bytes = kTestBodyLimit;
    options.max_batch_texts = 8;
    options.thread_count = 2;
    service_ = std::make_unique<http::HttpService>(*models_, std::move(hooks), options);
    ASSERT_TRUE(service_->Start("127.0.0.1", 0).ok());
    ASSERT_GT(service_->port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", service_->port());
    client_->set_read_timeout(5, 0);
  }

  void TearDown() override {
    client_.reset();
    service_.reset();  // stops the server before the executors go
    models_.reset();
  }

  int Count(const std::string& kind_and_status) {
    std::lock_guard<std::mutex> lock(counts_mu_);
    auto it = counts_.find(kind_and_status);
    return it == counts_.end() ? 0 : it->second;
  }

  httplib::Result Post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  json PostJson(const std::string& path, const json& body, int want_status) {
    httplib::Result result = Post(path, body.dump());
    EXPECT_TRUE(result) << "no response";
    if (!result) return json();
    EXPECT_EQ(result->status, want_status) << result->body;
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
    json parsed = json::parse(result->body, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << result->body;
    return parsed;
  }

  std::unique_ptr<ServedModels> models_;
  FakeExecutor* lm_ = nullptr;
  FakeExecutor* mt_ = nullptr;
  std::unique_ptr<http::HttpService> service_;
  std::unique_ptr<httplib::Client> client_;
  std::mutex counts_mu_;
  std::map<std::string, int> counts_;
};

TEST_F(HttpServiceTest, CompletionNonStreaming) {
  FakeExecutor::Behavior behavior;
  behavior.reason = FinishReason::kEos;
  lm_->set_behavior(behavior);
  json response = PostJson("/v1/completions",
                           {{"prompt", "Once upon"},
                            {"max_tokens", 7},
                            {"temperature", 0.5},
                            {"top_p", 0.9},
                            {"top_k", 40},
                            {"repetition_penalty", 1.1},
                            {"seed", 42},
                            {"stop", {"\n\n", "END"}}},
                           200);
  EXPECT_TRUE(absl::StartsWith(response["id"].get<std::string>(), "cmpl-"));
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["model"], kLm);
  EXPECT_GT(response["created"].get<int64_t>(), 1600000000);
  ASSERT_EQ(response["choices"].size(), 1u);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["text"], "Hello, world");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["abcd"]["finish_reason"], "eos");
  EXPECT_FALSE(choice.contains("abcd_finish_reason"));
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(response["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);
  EXPECT_EQ(response["usage"]["total_tokens"], 12);

  ASSERT_EQ(lm_->requests().size(), 1u);
  const GenerationRequest request = lm_->requests()[0];
  EXPECT_EQ(request.prompt, "Once upon");
  EXPECT_EQ(request.max_tokens, 7);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 0.9f);
  EXPECT_EQ(request.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(request.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(request.sampling.seed, 42u);
  EXPECT_EQ(request.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(Count("completions/ok"), 1);
}

TEST_F(HttpServiceTest, CompletionDefaultsAndNamedModel) {
  json response = PostJson("/v1/completions", {{"model", kLm}, {"prompt", {"only one"}}}, 200);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["choices"][0]["abcd"]["finish_reason"], "length");
  ASSERT_EQ(lm_->requests().size(), 1u);
  const GenerationRequest request = lm_->requests()[0];
  EXPECT_EQ(request.prompt, "only one");
  EXPECT_EQ(request.max_tokens, 16);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_TRUE(request.stop.empty());
}

TEST_F(HttpServiceTest, CompletionStreaming) {
  FakeExecutor::Behavior behavior;
  // "café" split inside the two-byte "é": no delta may carry half a character.
  behavior.pieces = {"The", " caf", "\xC3", "\xA9", " is", " open"};
  behavior.piece_delay = absl::Milliseconds(2);
  lm_->set_behavior(behavior);
  httplib::Result result = Post("/v1/completions", R"({"prompt": "x", "stream": true})");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> payloads = SsePayloads(result->body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  std::string id;
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    json chunk = json::parse(payloads[i], nullptr, false);
    ASSERT_FALSE(chunk.is_discarded()) << payloads[i];
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_EQ(chunk["model"], kLm);
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id);  // one id for the whole stream
    const std::string delta = chunk["choices"][0]["text"];
    EXPECT_EQ(delta.find("\xEF\xBF\xBD"), std::string::npos) << "split UTF-8 in " << delta;
    text += delta;
    const bool last = i + 2 == payloads.size();
    if (!last) {
      EXPECT_FALSE(delta.empty());
      EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
      EXPECT_FALSE(chunk.contains("usage"));
    } else {
      // Without stream_options.include_usage no chunk has usage (OpenAI's default).
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
      EXPECT_EQ(chunk["choices"][0]["abcd"]["finish_reason"], "length");
      EXPECT_FALSE(chunk.contains("usage"));
    }
  }
  EXPECT_EQ(text, "The caf\xC3\xA9 is open");
  EXPECT_EQ(Count("completions/ok"), 1);
}

TEST_F(HttpServiceTest, StreamingErrorEndsWithErrorEventAndDone) {
  FakeExecutor::Behavior behavior;
  behavior.pieces = {"partial"};
  behavior.final_status = absl::DeadlineExceededError("deadline passed");
  lm_->set_behavior(behavior);
  httplib::Result result = Post("/v1/completions", R"({"prompt": "x", "stream": true})");
  ASSERT_TRUE(result);
  std::vector<std::string> payloads = SsePayloads(result->body);
  ASSERT_EQ(payloads.size(), 3u) << result->body;
  EXPECT_EQ(json::parse(payloads[0])["choices"][0]["text"], "partial");
  EXPECT_EQ(json::parse(payloads[1])["error"]["type"], "timeout_error");
  EXPECT_EQ(payloads[2], "[DONE]");
  EXPECT_EQ(Count("completions/deadline_exceeded"), 1);
}

TEST_F(HttpServiceTest, ClientDisconnectMidStreamCancels) {
  FakeExecutor::Behavior behavior;
  behavior.pieces = {"tick "};
  behavior.piece_delay = absl::Milliseconds(10);
  behavior.until_cancelled = true;
  lm_->set_behavior(behavior);
  RawClient client(service_->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.SendPost("/v1/completions", R"({"prompt": "x", "stream": true})"));
  ASSERT_TRUE(client.ReadUntil("tick", absl::Seconds(3)));
  client.Close();
  const RequestId id = lm_->last_id();
  EXPECT_TRUE(WaitFor([&] { return lm_->WasCancelled(id); })) << "no Cancel after disconnect";
  EXPECT_TRUE(WaitFor([&] { return Count("completions/cancelled") == 1; }));
}

TEST_F(HttpServiceTest, ClientDisconnectWhileWaitingForFirstTokenCancels) {
  FakeExecutor::Behavior behavior;
  behavior.pieces = {};  // queued: nothing is written before the client goes
  behavior.until_cancelled = true;
  lm_->set_behavior(behavior);
  for (const bool stream : {true, false}) {  // non-streaming requests are cancelled at once too
    SCOPED_TRACE(stream);
    RawClient client(service_->port());
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(
        client.SendPost("/v1/completions", json{{"prompt", "x"}, {"stream", stream}}.dump()));
    ASSERT_TRUE(WaitFor([&] { return lm_->requests().size() == (stream ? 1u : 2u); }));
    client.Close();
    const RequestId id = lm_->last_id();
    EXPECT_TRUE(WaitFor([&] { return lm_->WasCancelled(id); })) << "no Cancel after disconnect";
  }
  EXPECT_TRUE(WaitFor([&] { return Count("completions/cancelled") == 2; }));
}

TEST_F(HttpServiceTest, StopEndsWaitingRequests) {
  FakeExecutor::Behavior behavior;
  behavior.pieces = {};
  behavior.until_cancelled = true;
  lm_->set_behavior(behavior);
  RawClient stream(service_->port());
  ASSERT_TRUE(stream.SendPost("/v1/completions", R"({"prompt": "x", "stream": true})"));
  ASSERT_TRUE(WaitFor([&] { return lm_->requests().size() == 1; }));
  int status = 0;
  std::thread waiter([&] {
    httplib::Result result = Post("/v1/completions", R"({"prompt": "x"})");
    status = result ? result->status : -1;
  });
  ASSERT_TRUE(WaitFor([&] { return lm_->requests().size() == 2; }));
  const absl::Time start = absl::Now();
  service_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  waiter.join();
  EXPECT_EQ(status, 503);
  EXPECT_TRUE(lm_->WasCancelled(lm_->last_id()));
  // A stream cut by Stop ends with an error event and [DONE] (the stream below, opened first).
  EXPECT_TRUE(stream.ReadUntil("data: [DONE]\n\n\r\n0\r\n\r\n", absl::Seconds(2)));
  EXPECT_TRUE(absl::StrContains(stream.received(), R"("type":"unavailable_error")"));
}

TEST_F(HttpServiceTest, TranslateSingle) {
  json response = PostJson("/v1/translate", {{"text", "Guten Morgen"}}, 200);
  EXPECT_EQ(response["translation"], "<Guten Morgen>");
  EXPECT_EQ(response["model"], kMt);
  EXPECT_EQ(response["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(response["usage"]["completion_tokens"], 1);
  ASSERT_EQ(mt_->requests().size(), 1u);
  const GenerationRequest request = mt_->requests()[0];
  EXPECT_EQ(request.source, "Guten Morgen");
  EXPECT_TRUE(request.prompt.empty());
  EXPECT_EQ(request.beam_size, 4);
  EXPECT_EQ(request.max_tokens, 128);
  EXPECT_TRUE(lm_->requests().empty());
  EXPECT_EQ(Count("translate/ok"), 1);
}

TEST_F(HttpServiceTest, TranslateBatchIsEnqueuedTogether) {
  FakeExecutor::Behavior behavior;
  behavior.hold_until_enqueued = 3;  // nothing finishes until all three are queued
  mt_->set_behavior(behavior);
  json response = PostJson(
      "/v1/translate",
      {{"model", kMt}, {"texts", {"eins", "zwei", "drei"}}, {"beam_size", 2}, {"max_tokens", 9}},
      200);
  EXPECT_EQ(response["translations"], json({"<eins>", "<zwei>", "<drei>"}));
  EXPECT_FALSE(response.contains("translation"));
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);
  ASSERT_EQ(mt_->requests().size(), 3u);
  for (const GenerationRequest& request : mt_->requests()) {
    EXPECT_EQ(request.beam_size, 2);
    EXPECT_EQ(request.max_tokens, 9);
  }
}

TEST_F(HttpServiceTest, ModelsList) {
  httplib::Result result = client_->Get("/v1/models");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  json response = json::parse(result->body);
  EXPECT_EQ(response["object"], "list");
  ASSERT_EQ(response["data"].size(), 2u);
  EXPECT_EQ(response["data"][0]["id"], kLm);
  EXPECT_EQ(response["data"][0]["object"], "model");
  EXPECT_EQ(response["data"][0]["owned_by"], "abcd");
  EXPECT_EQ(response["data"][0]["kind"], "lm");
  EXPECT_EQ(response["data"][0]["state_bytes_per_sequence"], 4096);
  EXPECT_EQ(response["data"][1]["id"], kMt);
  EXPECT_EQ(response["data"][1]["kind"], "translation");
  EXPECT_EQ(response["data"][1]["state_bytes_per_sequence"], 8192);

  result = client_->Get(absl::StrCat("/v1/models/", kMt).c_str());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(json::parse(result->body)["id"], kMt);
  result = client_->Get("/v1/models/nope");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
  EXPECT_EQ(Count("list_models/ok"), 2);
  EXPECT_EQ(Count("list_models/not_found"), 1);
}

TEST_F(HttpServiceTest, HealthAndReadiness) {
  auto status_of = [&](const char* path) {
    httplib::Result result = client_->Get(path);
    return result ? result->status : -1;
  };
  EXPECT_EQ(status_of("/healthz"), 200);
  EXPECT_EQ(json::parse(client_->Get("/healthz")->body)["status"], "ok");
  EXPECT_EQ(status_of("/readyz"), 200);

  models_->set_ready(false);
  EXPECT_EQ(status_of("/readyz"), 503);
  EXPECT_EQ(json::parse(client_->Get("/readyz")->body)["status"], "loading");
  EXPECT_EQ(status_of("/healthz"), 200);

  models_->set_ready(true);
  EXPECT_EQ(status_of("/readyz"), 200);
  models_->set_draining(true);
  EXPECT_EQ(status_of("/readyz"), 503);
  EXPECT_EQ(json::parse(client_->Get("/readyz")->body)["status"], "draining");
  EXPECT_EQ(status_of("/healthz"), 200);
  models_->set_draining(false);
  EXPECT_EQ(status_of("/readyz"), 200);
  // A backend that failed for good: not ready, and the reason names the model.
  lm_->set_backend_failure("CUDA device 0: illegal address");
  EXPECT_EQ(status_of("/readyz"), 503);
  const json failed = json::parse(client_->Get("/readyz")->body);
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_NE(failed["error"].get<std::string>().find("illegal address"), std::string::npos);
  EXPECT_EQ(status_of("/healthz"), 200);
  lm_->set_backend_failure("");
  models_->set_draining(true);
  json error = PostJson("/v1/completions", {{"prompt", "x"}}, 503);
  EXPECT_EQ(error["error"]["type"], "unavailable_error");
  EXPECT_TRUE(lm_->requests().empty());
  EXPECT_EQ(Count("completions/unavailable"), 1);
}

TEST_F(HttpServiceTest, ProbesAnswerWhileStreamsHoldEveryBaseThread) {
  FakeExecutor::Behavior behavior;
  behavior.pieces = {};
  behavior.until_cancelled = true;
  lm_->set_behavior(behavior);
  std::vector<std::unique_ptr<RawClient>> streams;
  for (int i = 0; i < 4; ++i) {  // thread_count is 2
    streams.push_back(std::make_unique<RawClient>(service_->port()));
    ASSERT_TRUE(streams.back()->SendPost("/v1/completions", R"({"prompt":"x","stream":true})"));
  }
  ASSERT_TRUE(WaitFor([&] { return lm_->requests().size() == 4; }));
  httplib::Result result = client_->Get("/healthz");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
}

TEST_F(HttpServiceTest, MetricsPassthrough) {
  httplib::Result result = client_->Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "# TYPE abcd_up gauge\nabcd_up 1\n");
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
}

TEST_F(HttpServiceTest, ExecutorErrorsMapToHttpStatus) {
  struct Case {
    absl::Status enqueue_status;
    absl::Status final_status;
    int http_status;
    std::string type;
    std::string label;
  };
  const std::vector<Case> cases = {
      {absl::ResourceExhaustedError("waiting queue is full"),
       {},
       429,
       "overloaded_error",
       "resource_exhausted"},
      {absl::UnavailableError("draining"), {}, 503, "unavailable_error", "unavailable"},
      {absl::InvalidArgumentError("prompt has 5000 tokens; the limit is 4096"),
       {},
       400,
       "invalid_request_error",
       "invalid_argument"},
      {{}, absl::DeadlineExceededError("deadline"), 504, "timeout_error", "deadline_exceeded"},
      {{}, absl::InternalError("boom"), 500, "server_error", "internal"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    FakeExecutor::Behavior behavior;
    behavior.enqueue_status = c.enqueue_status;
    behavior.final_status = c.final_status;
    lm_->set_behavior(behavior);
    json error = PostJson("/v1/completions", {{"prompt", "x"}}, c.http_status);
    EXPECT_EQ(error["error"]["type"], c.type);
    EXPECT_TRUE(error["error"]["code"].is_null());
    EXPECT_EQ(Count(absl::StrCat("completions/", c.label)), 1);
  }
  FakeExecutor::Behavior behavior;
  behavior.enqueue_status = absl::ResourceExhaustedError("queue full");
  mt_->set_behavior(behavior);
  json error = PostJson("/v1/translate", {{"texts", {"a", "b"}}}, 429);
  EXPECT_EQ(error["error"]["type"], "overloaded_error");
  EXPECT_EQ(Count("translate/resource_exhausted"), 1);
}

TEST_F(HttpServiceTest, BadInputTable) {
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string param;  // "" -> null
    std::string message_contains;
  };
  const std::string deep = std::string(500, '[') + std::string(500, ']');
  const std::vector<Case> cases = {
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt", "prompt must be a non-empty"},
      {"/v1/completions", R"({"max_tokens": 5})", 400, "prompt", "prompt is required"},
      {"/v1/completions", R"({"prompt": 17})", 400, "prompt", "prompt must be"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt", "exactly one string"},
      {"/v1/completions", R"({"prompt": [-1]})", 400, "prompt[0]", "prompt[0] must be a token id"},
      {"/v1/completions", R"({"prompt": [17, "a"]})", 400, "prompt[1]",
       "prompt[1] must be a token"},
      {"/v1/completions", R"({"prompt": [17, 2147483648]})", 400, "prompt[1]", "prompt[1]"},
      {"/v1/completions", R"({"prompt": )" + deep + "}", 400, "prompt[0][0][0][0][0][0][0]",
       "prompt[0][0][0][0][0][0][0]... nests JSON deeper than 256 levels"},
      {"/v1/completions", R"({"prompt": )" + std::string(255, '[') + std::string(255, ']') + "}",
       400, "prompt", "prompt must be"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -5})", 400, "max_tokens",
       "max_tokens must be an integer in [1, 4096], got -5"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1000000000000})", 400, "max_tokens",
       "max_tokens must be an integer in [1, 4096], got 1000000000000"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "16"})", 400, "max_tokens",
       "got \"16\""},
      {"/v1/completions", R"({"prompt": "x", "temperature": 500})", 400, "temperature",
       "temperature must be in [0, 100]"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature",
       "temperature"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 1e300})", 400, "temperature",
       "temperature"},
      {"/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "temperature",
       "temperature must be a number"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 1.5})", 400, "top_p",
       "top_p must be in (0, 1]"},
      {"/v1/completions", R"({"prompt": "x", "top_k": -1})", 400, "top_k", "top_k"},
      {"/v1/completions", R"({"prompt": "x", "repetition_penalty": 0})", 400, "repetition_penalty",
       "repetition_penalty"},
      {"/v1/completions", R"({"prompt": "x", "seed": -1})", 400, "seed", "seed"},
      {"/v1/completions", R"({"prompt": "x", "stop": [1]})", 400, "stop[0]", "stop[0]"},
      {"/v1/completions", R"({"prompt": "x", "stop": ""})", 400, "stop", "stop"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream",
       "stream must be a boolean"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", 400, "n",
       "n must be an integer in [1, 16]"},
      {"/v1/completions", R"({"prompt": "x", "n": 17})", 400, "n", "n must be"},
      {"/v1/completions", R"({"prompt": "x", "n": 2, "session_id": "new"})", 400, "n",
       "n: must be 1 with a session"},
      {"/v1/completions", R"({"prompt": "x", "session_id": 5})", 400, "session_id",
       "session_id must be"},
      {"/v1/completions", R"({"prompt": "x", "session_id": ""})", 400, "session_id",
       "session_id must be"},
      {"/v1/completions", R"({"prompt": "x", "model": "nope"})", 404, "model",
       "model 'nope' is not served (lm models: abc-lm-test)"},
      {"/v1/completions", R"({"prompt": "x", "model": 7})", 400, "model", "model must be"},
      {"/v1/completions", R"({"prompt": "x", "model": "abc-mt-test"})", 400, "model",
       "translation model"},
      {"/v1/completions", R"({"prompt": "hi")", 400, "", "not valid JSON"},
      {"/v1/completions", "", 400, "", "not valid JSON"},
      {"/v1/completions", R"([{"prompt": "hi"}])", 400, "", "must be a JSON object"},
      {"/v1/completions", "\"prompt\"", 400, "", "must be a JSON object"},
      {"/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "", "not valid JSON"},
      {"/v1/translate", R"({})", 400, "text", "text is required"},
      {"/v1/translate", R"({"text": ""})", 400, "text", "text must be a non-empty string"},
      {"/v1/translate", R"({"text": "a", "texts": ["b"]})", 400, "text", "mutually exclusive"},
      {"/v1/translate", R"({"texts": []})", 400, "texts", "texts must be an array of 1 to 8"},
      {"/v1/translate", R"({"texts": ["a","b","c","d","e","f","g","h","i"]})", 400, "texts",
       "got an array of 9"},
      {"/v1/translate", R"({"texts": ["a", 5]})", 400, "texts[1]", "texts[1] must be"},
      {"/v1/translate", R"({"text": "a", "beam_size": 0})", 400, "beam_size",
       "beam_size must be an integer in [1, 16], got 0"},
      {"/v1/translate", R"({"text": "a", "beam_size": 17})", 400, "beam_size", "beam_size"},
      {"/v1/translate", R"({"text": "a", "max_tokens": -1})", 400, "max_tokens", "max_tokens"},
      {"/v1/translate", R"({"text": "a", "model": "abc-lm-test"})", 400, "model", "is a lm model"},
      {"/v1/completions", R"({"prompt": ")" + std::string(kTestBodyLimit, 'x') + "\"}", 413, "",
       "exceeds the limit"},
      {"/v1/nothing", R"({})", 404, "", "no route"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.path, " ", c.body.substr(0, 80)));
    httplib::Result result = Post(c.path, c.body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, c.status);
    json body = json::parse(result->body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("error")) << result->body;
    const json& error = body["error"];
    EXPECT_TRUE(error["message"].is_string());
    const std::string message = error["message"].is_string() ? error["message"] : "";
    EXPECT_TRUE(absl::StrContains(message, c.message_contains)) << message;
    EXPECT_FALSE(absl::StrContains(message, "sampling.")) << message;
    if (c.param.empty()) {
      EXPECT_TRUE(error["param"].is_null()) << error;
    } else {
      EXPECT_EQ(error["param"], c.param) << error;
      EXPECT_TRUE(absl::StrContains(message, c.param)) << message;
    }
    if (c.status == 400) {
      EXPECT_EQ(error["type"], "invalid_request_error");
    }
  }
  EXPECT_TRUE(lm_->requests().empty());
  EXPECT_TRUE(mt_->requests().empty());
  EXPECT_EQ(Count("completions/ok"), 0);
  // Every completions case but the unknown route counted once, as invalid_argument; the
  // unknown model as not_found.
  const auto completions = std::count_if(cases.begin(), cases.end(),
                                         [](const Case& c) { return c.path == "/v1/completions"; });
  EXPECT_EQ(Count("completions/invalid_argument"), completions - 1);
  EXPECT_EQ(Count("completions/not_found"), 1);
}

// What the transport refuses before a request could be read is counted too, as kind "other".
TEST_F(HttpServiceTest, TransportRefusalsAreCounted) {
  RawClient client(service_->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.SendRaw("GET /" + std::string(64 * 1024, 'a')));
  ASSERT_TRUE(client.ReadUntil("\r\n\r\n", absl::Seconds(3)));
  EXPECT_TRUE(absl::StartsWith(client.received(), "HTTP/1.1 414")) << client.received();
  EXPECT_TRUE(WaitFor([&] { return Count("other/invalid_argument") == 1; }));
}

TEST_F(HttpServiceTest, ChunkedRequestBodyIsRefusedUnread) {
  // httplib applies max_body_bytes to Content-Length bodies only; chunked ones are refused.
  RawClient client(service_->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.SendRaw(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "10\r\n{\"prompt\": \"x\"} \r\n0\r\n\r\n"));
  ASSERT_TRUE(client.ReadUntil("\r\n\r\n", absl::Seconds(3)));
  EXPECT_TRUE(absl::StartsWith(client.received(), "HTTP/1.1 411")) << client.received();
  EXPECT_TRUE(WaitFor([&] { return Count("completions/invalid_argument") == 1; }));
  EXPECT_TRUE(lm_->requests().empty());
}

TEST_F(HttpServiceTest, WrongMethodIs405) {
  httplib::Result result = client_->Get("/v1/completions");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 405);
  EXPECT_EQ(result->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(result->body)["error"]["type"], "invalid_request_error");
  result = client_->Post("/healthz", "{}", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 405);
  EXPECT_EQ(result->get_header_value("Allow"), "GET");
  result = client_->Get("/nowhere");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
}

}  // namespace
}  // namespace abcd
