// The fixture of the HTTP OpenAI-surface tests (http_openai_test.cc: completions extras;
// http_chat_test.cc: chat completions and tool calls): the real HttpService over a scripted
// executor that replays given events; token texts come from the bundled lm tokenizer.
//
// Thread-safety: test-only; ScriptedExecutor replays on its own threads.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/sampling/json_grammar.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"
#include "server/core/served_models.h"
#include "server/http/chat_route.h"
#include "server/http/completion_format.h"
#include "server/http/http_service.h"
#include "tests/testing/fake_executor.h"

namespace abcd::http_testing {

using nlohmann::json;

// Replays `events` (the last one gets finished = true) for each accepted request on its own
// thread, and records the requests.
class ScriptedExecutor final : public Executor {
 public:
  explicit ScriptedExecutor(const Model& model) : backend_(model, 1 << 20) {}
  ~ScriptedExecutor() override { Shutdown(); }

  void set_events(std::vector<GenerationEvent> events) {
    std::lock_guard<std::mutex> lock(mu_);
    events_ = std::move(events);
  }
  std::vector<GenerationRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(std::move(request));
    threads_.emplace_back([events = events_, callback = std::move(callback)]() mutable {
      for (size_t i = 0; i < events.size(); ++i) {
        events[i].finished = i + 1 == events.size();
        callback(std::move(events[i]));
      }
    });
    return static_cast<RequestId>(requests_.size());
  }
  void Cancel(RequestId) override {}
  void StartDraining() override {}
  void Shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }
  ExecutorStats LatestStats() const override { return {}; }
  const DecodeBackend& backend() const override { return backend_; }

 private:
  CpuBackend backend_;
  mutable std::mutex mu_;
  std::vector<GenerationEvent> events_;
  std::vector<GenerationRequest> requests_;
  std::vector<std::thread> threads_;
};

inline TokenLogprobs Scored(int32_t token, float logprob,
                            std::vector<std::pair<int32_t, float>> top) {
  TokenLogprobs scored;
  scored.token = token;
  scored.logprob = logprob;
  scored.top = std::move(top);
  return scored;
}

inline std::vector<json> SseChunks(const std::string& body, bool* done) {
  std::vector<json> chunks;
  *done = false;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    const absl::string_view data = event.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    EXPECT_FALSE(*done) << "a chunk after [DONE]";
    chunks.push_back(json::parse(data.begin(), data.end(), nullptr, false));
    EXPECT_FALSE(chunks.back().is_discarded()) << data;
  }
  return chunks;
}

class HttpOpenAiTest : public testing::GoldenModelSuite {
 protected:
  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    auto tokenizer = Tokenizer::Load(std::string(ABCD_SOURCE_DIR) + "/models/tokenizers/lm.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    models_ = std::make_unique<ServedModels>();
    auto lm = std::make_unique<ServedModel>();
    lm->name = "abc-lm-test";
    lm->kind = ModelKind::kLanguageModel;
    lm->tokenizer = *std::move(tokenizer);
    tokenizer_ = lm->tokenizer.get();
    lm->executor = std::make_unique<ScriptedExecutor>(*model_);
    lm_ = static_cast<ScriptedExecutor*>(lm->executor.get());
    models_->Add(std::move(lm));
    models_->set_ready(true);
    service_ =
        std::make_unique<http::HttpService>(*models_, http::HttpHooks{}, http::HttpOptions{});
    ASSERT_TRUE(service_->Start("127.0.0.1", 0).ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", service_->port());
    client_->set_read_timeout(5, 0);

    // The script generates these ids (the first with two alternatives) and ends with EOS.
    ids_ = *tokenizer_->Encode(" big red dog");
    ASSERT_GE(ids_.size(), 2u);
    GenerationEvent first;
    first.token_ids = {ids_[0]};
    first.text = *tokenizer_->Decode(std::vector<int32_t>{ids_[0]});
    first.logprobs = {Scored(ids_[0], -0.5f, {{ids_[0], -0.5f}, {ids_[1], -1.5f}})};
    GenerationEvent rest;
    for (size_t i = 1; i < ids_.size(); ++i) {
      rest.token_ids.push_back(ids_[i]);
      rest.logprobs.push_back(Scored(ids_[i], -0.25f * static_cast<float>(i), {{ids_[i], -0.1f}}));
    }
    rest.text = Text(ids_).substr(first.text.size());
    GenerationEvent last;
    last.finish_reason = FinishReason::kEos;
    last.prompt_tokens = 3;
    last.completion_tokens = static_cast<int>(ids_.size());
    generated_ = {first, rest, last};
  }

  void TearDown() override {
    client_.reset();
    service_.reset();
    models_.reset();
  }

  std::string Text(const std::vector<int32_t>& ids) const { return *tokenizer_->Decode(ids); }

  httplib::Result Post(const json& body) {
    return client_->Post("/v1/completions", body.dump(), "application/json");
  }
  json PostJson(const json& body) {
    httplib::Result result = Post(body);
    EXPECT_TRUE(result);
    if (!result) return json();
    EXPECT_EQ(result->status, 200) << result->body;
    return json::parse(result->body, nullptr, false);
  }
  // A 400 whose message starts with `field`.
  void ExpectRefused(const json& body, const std::string& field) {
    httplib::Result result = Post(body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 400) << body.dump() << " -> " << result->body;
    const json error = json::parse(result->body, nullptr, false);
    const std::string message = error["error"]["message"];
    EXPECT_TRUE(absl::StartsWith(message, field)) << body.dump() << " -> " << message;
    // OpenAI's error.param: the path the message starts with.
    EXPECT_EQ(error["error"]["param"], field) << result->body;
  }

  std::unique_ptr<ServedModels> models_;
  const Tokenizer* tokenizer_ = nullptr;
  ScriptedExecutor* lm_ = nullptr;
  std::unique_ptr<http::HttpService> service_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<int32_t> ids_;
  std::vector<GenerationEvent> generated_;
};

}  // namespace abcd::http_testing
