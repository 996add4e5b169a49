// The continuous-batching Executor on the bundled default models: greedy equals the
// single-sequence generator, seeded sampling is reproducible among 64 other streams, cancel
// frees state at once, overload is refused, beam search translates and releases its forks,
// and decode rows go to a backend that samples itself (the CUDA path) only when no host-side
// penalty needs their logits.
#include "engine/scheduler/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/generator.h"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::Collector;
using testing::kGmatDir;
using testing::kLmDir;
using testing::kMtDir;
using testing::SpeculationCounter;
using testing::Tokens;

std::string Text(const std::vector<GenerationEvent>& events) {
  std::string out;
  for (const auto& e : events) out += e.text;
  return out;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void Load(const std::string& dir) {
    auto model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::Load(dir + "/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  void Start(ExecutorOptions options = {}) {
    auto executor = Executor::Create(*model_, *tokenizer_, options);
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = std::move(*executor);
  }
  void WaitForIdle() {
    for (int i = 0; i < 2000; ++i) {
      const ExecutorStats stats = executor_->LatestStats();
      if (stats.running_sequences == 0 && stats.waiting_requests == 0 &&
          stats.state_bytes_in_use == 0) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    FAIL() << "executor did not become idle";
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Executor> executor_;
};

TEST_F(ExecutorTest, GreedyEqualsSingleSequenceGenerator) {
  Load(kLmDir);
  Start();
  GenerationRequest request;
  request.prompt = "This program is free software";
  request.max_tokens = 24;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  Collector collector;
  ASSERT_TRUE(executor_->Enqueue(request, collector.Callback()).ok());
  const auto events = collector.Wait();
  ASSERT_TRUE(events.back().status.ok()) << events.back().status;
  EXPECT_EQ(events.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(events.size(), 24u);  // streamed token by token

  StatePool pool(model_->state_layout(), int64_t{1} << 30);
  GenerateOptions options;
  options.max_tokens = 24;
  options.sampling.temperature = 0.0f;
  options.ignore_eos = true;
  auto reference = Generate(*model_, *tokenizer_, pool, request.prompt, options);
  ASSERT_TRUE(reference.ok());
  EXPECT_EQ(Tokens(events), reference->token_ids);
  EXPECT_EQ(Text(events), reference->text);
  EXPECT_EQ(events.back().completion_tokens, 24);
  EXPECT_EQ(events.back().prompt_tokens, static_cast<int>(reference->prompt_ids.size()));
}

TEST_F(ExecutorTest, SeededSamplingIsReproducibleAmongOtherStreams) {
  Load(kLmDir);
  ExecutorOptions options;
  options.prefill_token_budget = 16;  // forces chunked prefill beside decoding streams
  Start(options);
  GenerationRequest request;
  request.prompt = "the terms of the GNU General Public License";
  request.max_tokens = 20;
  request.sampling.temperature = 0.9f;
  request.sampling.top_p = 0.9f;
  request.sampling.seed = 1234;
  request.ignore_eos = true;
  Collector alone;
  ASSERT_TRUE(executor_->Enqueue(request, alone.Callback()).ok());
  const std::vector<int32_t> expected = Tokens(alone.Wait());

  std::vector<std::unique_ptr<Collector>> others;
  for (int i = 0; i < 64; ++i) {
    GenerationRequest other = request;
    other.prompt = "copies of the software " + std::to_string(i);
    other.sampling.seed = i;
    other.max_tokens = 10 + i % 20;
    others.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(executor_->Enqueue(other, others.back()->Callback()).ok());
  }
  Collector crowded;
  ASSERT_TRUE(executor_->Enqueue(request, crowded.Callback()).ok());
  EXPECT_EQ(Tokens(crowded.Wait()), expected);
  for (auto& other : others) EXPECT_TRUE(other->Wait().back().status.ok());
  WaitForIdle();
}

TEST_F(ExecutorTest, CancelFreesStateWithinAnIteration) {
  Load(kLmDir);
  Start();
  GenerationRequest request;
  request.prompt = "a long generation";
  request.max_tokens = 4000;
  request.ignore_eos = true;
  Collector collector;
  auto id = executor_->Enqueue(request, collector.Callback());
  ASSERT_TRUE(id.ok());
  while (collector.count() < 3) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_GT(executor_->LatestStats().state_bytes_in_use, 0);
  executor_->Cancel(*id);
  const auto events = collector.Wait();
  EXPECT_EQ(events.back().status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(events.size(), 100u);
  WaitForIdle();
  executor_->Cancel(*id);  // finished ids are ignored
  executor_->Cancel(987654);
}

TEST_F(ExecutorTest, OverloadIsRefusedAndServingContinues) {
  Load(kLmDir);
  ExecutorOptions options;
  options.state_budget_bytes = model_->state_layout().FixedBytes();  // one sequence at a time
  options.max_waiting_requests = 3;
  Start(options);
  GenerationRequest request;
  request.prompt = "hold the only slot";
  request.max_tokens = 200;
  request.ignore_eos = true;
  std::vector<std::unique_ptr<Collector>> accepted;
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    accepted.push_back(std::make_unique<Collector>());
    auto id = executor_->Enqueue(request, accepted.back()->Callback());
    if (!id.ok()) {
      EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      accepted.pop_back();
      ++refused;
    }
  }
  EXPECT_GE(refused, 5);
  for (auto& c : accepted) EXPECT_TRUE(c->Wait().back().status.ok());
  Collector after;
  request.max_tokens = 3;
  ASSERT_TRUE(executor_->Enqueue(request, after.Callback()).ok());
  EXPECT_TRUE(after.Wait().back().status.ok());
}

// Generated tokens reach the observer as they are generated (so abcd_generated_tokens_total
// moves during a long stream), each once: in all, the requests' completion_tokens.
TEST_F(ExecutorTest, ObserverCountsTokensAsTheyAreGenerated) {
  struct Counting : ExecutorObserver {
    std::atomic<int> generated{0};
    std::atomic<int> completion{0};
    void OnTokensGenerated(int tokens) override { generated += tokens; }
    void OnRequestFinished(const absl::Status&, int, int completion_tokens, double) override {
      completion += completion_tokens;
    }
  };
  for (const std::string& dir : {kLmDir, kMtDir}) {
    Load(dir);
    Counting observer;
    ExecutorOptions options;
    options.observer = &observer;
    Start(options);
    GenerationRequest request;
    (dir == kLmDir ? request.prompt : request.source) = "This program is free software";
    request.max_tokens = 12;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    request.beam_size = dir == kLmDir ? 1 : 4;
    std::vector<std::pair<int, int>> seen;  // (generated, completion) at each streamed event
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    ASSERT_TRUE(executor_
                    ->Enqueue(request,
                              [&](GenerationEvent event) {
                                std::lock_guard<std::mutex> lock(mu);
                                if (!event.finished) {
                                  seen.emplace_back(observer.generated, observer.completion);
                                }
                                done = done || event.finished;
                                done_cv.notify_all();
                              })
                    .ok());
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
    lock.unlock();
    executor_.reset();  // joins the engine thread before the next Load replaces the model
    for (size_t i = 0; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i], std::make_pair(static_cast<int>(i) + 1, 0)) << dir << " event " << i;
    }
    EXPECT_EQ(observer.generated.load(), observer.completion.load()) << dir;
    EXPECT_GT(observer.generated.load(), 0) << dir;
    if (dir == kLmDir) {
      EXPECT_EQ(seen.size(), 11u);  // the 12th token comes with the end
    }
  }
}

TEST_F(ExecutorTest, RejectsBadRequestsNamingTheField) {
  Load(kLmDir);
  ExecutorOptions options;
  options.max_prompt_tokens = 8;
  Start(options);
  auto expect = [&](GenerationRequest r, absl::StatusCode code, const std::string& fragment) {
    auto id = executor_->Enqueue(r, [](GenerationEvent) {});
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), code);
    EXPECT_NE(std::string(id.status().message()).find(fragment), std::string::npos) << id.status();
  };
  GenerationRequest ok;
  ok.prompt = "hi";
  GenerationRequest r = ok;
  r.prompt = "";
  expect(r, absl::StatusCode::kInvalidArgument, "prompt");
  r = ok;
  r.max_tokens = -5;
  expect(r, absl::StatusCode::kInvalidArgument, "max_tokens");
  r.max_tokens = 0;
  expect(r, absl::StatusCode::kInvalidArgument,
         "max_tokens must be in [1, 4096], got 0 (0 only with prompt_logprobs)");
  r = ok;
  r.max_tokens = 1 << 30;
  expect(r, absl::StatusCode::kInvalidArgument, "max_tokens");
  r = ok;
  r.sampling.top_p = 0.0f;
  expect(r, absl::StatusCode::kInvalidArgument, "top_p");
  r = ok;
  r.sampling.logit_bias = {{1000, 1.0f}};  // the vocabulary is [0, 1000)
  expect(r, absl::StatusCode::kInvalidArgument, "sampling.logit_bias: token id 1000 is outside");
  r = ok;
  r.stop = {""};
  expect(r, absl::StatusCode::kInvalidArgument, "stop[0]");
  r = ok;
  r.prompt = "a prompt that is far longer than eight tokens of the tokenizer";
  expect(r, absl::StatusCode::kInvalidArgument, "prompt is");
  executor_->StartDraining();
  expect(ok, absl::StatusCode::kUnavailable, "draining");
}

TEST_F(ExecutorTest, RefusesBySizeBeforeTokenizingAndNamesTheLimit) {
  Load(kLmDir);
  ExecutorOptions options;
  options.max_prompt_tokens = 8;
  Start(options);
  GenerationRequest r;
  r.prompt = std::string(8 * kMaxInputBytesPerToken + 1, 'a');
  auto id = executor_->Enqueue(r, [](GenerationEvent) {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("prompt is 129 bytes, more than 128"), std::string::npos)
      << id.status();
  EXPECT_EQ(executor_->CheckInput("prompt", 128), absl::OkStatus());
  EXPECT_EQ(executor_->CheckInput("prompt", 129).code(), absl::StatusCode::kInvalidArgument);
  // 4 MB is refused in far less time than tokenizing it would take.
  r.prompt = std::string(4 << 20, 'x');
  const absl::Time start = absl::Now();
  EXPECT_EQ(executor_->Enqueue(r, [](GenerationEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));
}

TEST_F(ExecutorTest, RequestThatCanNeverFitIsAClientError) {
  Load(kLmDir);
  ExecutorOptions options;
  options.state_budget_bytes = 1000;  // less than one sequence's state
  Start(options);
  GenerationRequest r;
  r.prompt = "hi";
  auto id = executor_->Enqueue(r, [](GenerationEvent) {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_NE(id.status().message().find("can never fit"), std::string::npos) << id.status();
  EXPECT_NE(id.status().message().find("budget is 1000"), std::string::npos) << id.status();
}

TEST_F(ExecutorTest, SourceAndBatchLimits) {
  Load(kMtDir);
  ExecutorOptions options;
  options.max_source_tokens = 6;
  options.max_batch_source_tokens = 10;
  Start(options);
  GenerationRequest r;
  r.max_tokens = 2;
  r.source = "one two three four five six seven eight nine ten";
  auto id = executor_->Enqueue(r, [](GenerationEvent) {});
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("longer than the limit of 6"), std::string::npos)
      << id.status();
  r.source = std::string(6 * kMaxInputBytesPerToken + 1, 'a');
  EXPECT_NE(executor_->Enqueue(r, [](GenerationEvent) {}).status().message().find("bytes"),
            std::string::npos);
  // Three sources of 4 tokens each (3 pieces + eos) exceed the batch total of 10.
  r.source = "Open file";
  Collector one;
  ASSERT_TRUE(executor_->Enqueue(r, one.Callback()).ok());
  const int tokens = one.Wait().back().prompt_tokens - 1;  // minus the decoder's bos
  ASSERT_GE(tokens, 2);
  ASSERT_LE(tokens, 5);
  const int fit = 10 / tokens;
  std::vector<GenerationRequest> batch(fit + 1, r);
  std::vector<EventCallback> callbacks(fit + 1, [](GenerationEvent) {});
  auto ids = executor_->EnqueueBatch(batch, callbacks);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("together, more than the limit of 10"), std::string::npos)
      << ids.status();
  batch.resize(fit);
  std::vector<std::unique_ptr<Collector>> collectors;
  callbacks.clear();
  for (int i = 0; i < fit; ++i) {
    collectors.push_back(std::make_unique<Collector>());
    callbacks.push_back(collectors.back()->Callback());
  }
  ids = executor_->EnqueueBatch(batch, callbacks);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), static_cast<size_t>(fit));
  for (auto& c : collectors) EXPECT_TRUE(c->Wait().back().status.ok());
  // One bad text refuses the whole batch, naming it.
  batch.back().source = "";
  callbacks.assign(fit, [](GenerationEvent) {});
  ids = executor_->EnqueueBatch(batch, callbacks);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find(absl::StrCat("texts[", fit - 1, "]")), std::string::npos)
      << ids.status();
  WaitForIdle();
}

// Sources are encoded a budget at a time between decode steps, oldest and shortest first in
// turn: a one-word translation queued behind many long sources is not held until all of them
// are encoded.
TEST_F(ExecutorTest, ShortSourceIsNotStuckBehindLongOnes) {
  Load(kMtDir);
  ExecutorOptions options;
  options.max_source_tokens = 4096;
  options.encode_token_budget = 64;
  Start(options);
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "open the file and save it ";
  std::mutex mu;
  std::vector<int> finish_order;
  constexpr int kLong = 8;
  GenerationRequest r;
  r.max_tokens = 1;
  r.source = long_text;
  for (int i = 0; i < kLong; ++i) {
    ASSERT_TRUE(executor_
                    ->Enqueue(r,
                              [&, i](GenerationEvent e) {
                                if (!e.finished) return;
                                std::lock_guard<std::mutex> lock(mu);
                                finish_order.push_back(i);
                              })
                    .ok());
  }
  r.source = "Open";
  r.max_tokens = 2;
  Collector short_one;
  ASSERT_TRUE(executor_->Enqueue(r, short_one.Callback()).ok());
  EXPECT_TRUE(short_one.Wait().back().status.ok());
  size_t long_done_before = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    long_done_before = finish_order.size();
  }
  // Before: every source was encoded in the admitting iteration, so all kLong came first.
  EXPECT_LE(long_done_before, 2u);
  WaitForIdle();
}

TEST_F(ExecutorTest, DeadlineEndsTheRequest) {
  Load(kLmDir);
  Start();
  GenerationRequest request;
  request.prompt = "slow";
  request.max_tokens = 4000;
  request.ignore_eos = true;
  request.deadline = absl::Now() + absl::Milliseconds(30);
  Collector collector;
  ASSERT_TRUE(executor_->Enqueue(request, collector.Callback()).ok());
  EXPECT_EQ(collector.Wait().back().status.code(), absl::StatusCode::kDeadlineExceeded);
  WaitForIdle();
}

TEST_F(ExecutorTest, BeamSearchTranslatesAndReleasesForks) {
  Load(kMtDir);
  Start();
  GenerationRequest request;
  request.source = "Open file";
  request.max_tokens = 12;
  request.beam_size = 4;
  Collector beams;
  ASSERT_TRUE(executor_->Enqueue(request, beams.Callback()).ok());
  const auto events = beams.Wait();
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].status.ok()) << events[0].status;
  EXPECT_FALSE(events[0].token_ids.empty());
  EXPECT_LE(events[0].token_ids.size(), 12u);
  EXPECT_EQ(events[0].prompt_tokens,
            1 + static_cast<int>(tokenizer_->Encode("Open file")->size()) + 1);
  WaitForIdle();
  Collector again;
  ASSERT_TRUE(executor_->Enqueue(request, again.Callback()).ok());
  EXPECT_EQ(again.Wait()[0].token_ids, events[0].token_ids);  // deterministic
  request.source = "";
  EXPECT_EQ(executor_->Enqueue(request, [](GenerationEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A GMAT model translates (greedy and beam 4) like any encoder-decoder, deterministically, and
// a source far longer than its 8 memory rows translates too.
TEST_F(ExecutorTest, GmatModelTranslates) {
  Load(kGmatDir);
  ExecutorOptions options;
  options.max_source_tokens = 4096;
  Start(options);
  for (int beam : {1, 4}) {
    GenerationRequest request;
    request.source = "Open file";
    request.max_tokens = 10;
    request.beam_size = beam;
    Collector first;
    ASSERT_TRUE(executor_->Enqueue(request, first.Callback()).ok());
    std::vector<int32_t> tokens;
    for (const auto& e : first.Wait()) {
      ASSERT_TRUE(e.status.ok()) << e.status;
      tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
    }
    EXPECT_FALSE(tokens.empty());
    EXPECT_LE(tokens.size(), 10u);
    WaitForIdle();
    Collector again;
    ASSERT_TRUE(executor_->Enqueue(request, again.Callback()).ok());
    std::vector<int32_t> repeated;
    for (const auto& e : again.Wait()) {
      repeated.insert(repeated.end(), e.token_ids.begin(), e.token_ids.end());
    }
    EXPECT_EQ(repeated, tokens);
    WaitForIdle();
  }
  std::string long_source;
  for (int i = 0; i < 100; ++i) long_source += "Open the file and save it. ";
  GenerationRequest request;
  request.source = long_source;
  request.max_tokens = 4;
  Collector collector;
  ASSERT_TRUE(executor_->Enqueue(request, collector.Callback()).ok());
  for (const auto& e : collector.Wait()) ASSERT_TRUE(e.status.ok()) << e.status;
  WaitForIdle();
}

TEST_F(ExecutorTest, ShutdownEndsEverythingOnce) {
  Load(kLmDir);
  Start();
  GenerationRequest request;
  request.prompt = "forever";
  request.max_tokens = 4000;
  request.ignore_eos = true;
  std::atomic<int> finals{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(executor_
                    ->Enqueue(request,
                              [&finals](GenerationEvent e) {
                                if (e.finished) finals++;
                              })
                    .ok());
  }
  executor_->Shutdown();
  EXPECT_EQ(finals.load(), 5);
  executor_->Shutdown();  // idempotent
}

// The CPU backend plus the sampling fast path, the way the CUDA backend offers it: greedy rows
// take the argmax of their logits; it counts the rows it sampled and can be told to fail.
class SelfSamplingBackend final : public DecodeBackend {
 public:
  // kFail: every DecodeAndSample fails, but the backend stays healthy (a bad batch);
  // kBreak: the first failure is permanent (Health() reports it, like a poisoned GPU context).
  enum class Mode { kWork, kFail, kBreak };
  SelfSamplingBackend(const Model& model, std::atomic<int>* sampled_rows, Mode mode)
      : cpu_(model, int64_t{1} << 30), sampled_rows_(sampled_rows), mode_(mode) {}
  absl::Status Health() const override {
    return broken_.load() ? absl::InternalError("device lost") : absl::OkStatus();
  }
  std::string name() const override { return "self-sampling"; }
  std::string device_description() const override { return "test"; }
  const ModelConfig& config() const override { return cpu_.config(); }
  int64_t weight_bytes() const override { return cpu_.weight_bytes(); }
  int64_t state_bytes_per_sequence() const override { return cpu_.state_bytes_per_sequence(); }
  absl::StatusOr<int64_t> RequestBytes(int64_t prompt, int64_t source, int64_t new_tokens,
                                       int sequences) const override {
    return cpu_.RequestBytes(prompt, source, new_tokens, sequences);
  }
  int64_t capacity_bytes() const override { return cpu_.capacity_bytes(); }
  BackendMemory memory() const override { return cpu_.memory(); }
  absl::StatusOr<SequenceId> Acquire() override { return cpu_.Acquire(); }
  void Release(SequenceId id) override { cpu_.Release(id); }
  absl::StatusOr<SequenceId> Fork(SequenceId id) override { return cpu_.Fork(id); }
  absl::Status Encode(std::span<const int32_t> source, SequenceId id) override {
    return cpu_.Encode(source, id);
  }
  absl::Status Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) override {
    return cpu_.Decode(rows, logits);
  }
  bool checkpoints_supported() const override { return true; }
  int64_t CheckpointBytes(int slots) const override { return cpu_.CheckpointBytes(slots); }
  absl::Status Rollback(SequenceId id, int checkpoint) override {
    return cpu_.Rollback(id, checkpoint);
  }
  bool samples_tokens() const override { return true; }
  absl::Status DecodeAndSample(std::span<const SampledRow> rows,
                               std::vector<int32_t>* tokens) override {
    if (mode_ != Mode::kWork) {
      broken_ = mode_ == Mode::kBreak;
      return absl::InternalError("device lost");
    }
    std::vector<DecodeRow> decode;
    for (const SampledRow& row : rows) {
      if (row.sampling.temperature != 0.0f || NeedsHostSampling(row.sampling)) {
        return absl::InvalidArgumentError("this test backend samples greedily only");
      }
      decode.push_back({row.sequence, row.token, true});
    }
    std::vector<float> logits;
    ABCD_RETURN_IF_ERROR(cpu_.Decode(decode, &logits));
    const int64_t vocab = config().vocab_size;
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* row = logits.data() + i * vocab;
      tokens->push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
    *sampled_rows_ += static_cast<int>(rows.size());
    return absl::OkStatus();
  }

 private:
  CpuBackend cpu_;
  std::atomic<int>* sampled_rows_;
  Mode mode_;
  std::atomic<bool> broken_{false};
};

TEST_F(ExecutorTest, BackendSampledDecodeRowsGiveTheHostSamplersGreedyTokens) {
  Load(kLmDir);
  ExecutorOptions options;
  options.prefill_token_budget = 5;  // prompts in chunks next to backend-sampled decode rows
  Start(options);
  std::atomic<int> sampled_rows{0};
  auto fast = Executor::Create(std::make_unique<SelfSamplingBackend>(
                                   *model_, &sampled_rows, SelfSamplingBackend::Mode::kWork),
                               *tokenizer_, options);
  ASSERT_TRUE(fast.ok()) << fast.status();

  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest request;
    request.prompt = "This program is free software, version " + std::to_string(i);
    request.max_tokens = 8 + i;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    requests.push_back(request);
  }
  requests[4].sampling.repetition_penalty = 1.3f;  // needs its logits on the host
  requests[5].stop = {"e"};                        // stop strings still end the stream
  requests[6].sampling.frequency_penalty = 1.0f;   // as do the OpenAI penalties,
  requests[6].sampling.presence_penalty = 0.5f;
  requests[7].sampling.logit_bias = {{5, 2.0f}};  // a logit bias
  requests[7].sampling.min_p = 0.1f;              // and min_p
  std::vector<std::vector<GenerationEvent>> results[2];
  Executor* executors[] = {executor_.get(), fast->get()};
  for (int e = 0; e < 2; ++e) {
    std::vector<std::unique_ptr<Collector>> collectors;
    for (const GenerationRequest& request : requests) {
      collectors.push_back(std::make_unique<Collector>());
      ASSERT_TRUE(executors[e]->Enqueue(request, collectors.back()->Callback()).ok());
    }
    for (auto& collector : collectors) results[e].push_back(collector->Wait());
  }
  int expected_sampled = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(results[1][i].back().status.ok()) << results[1][i].back().status;
    EXPECT_EQ(Tokens(results[1][i]), Tokens(results[0][i])) << i;
    EXPECT_EQ(Text(results[1][i]), Text(results[0][i])) << i;
    EXPECT_EQ(results[1][i].back().finish_reason, results[0][i].back().finish_reason) << i;
    // The first token comes from the prompt's logits; the rest from the backend, but not for
    // the requests with a penalty, a bias or min_p.
    if (i < 4 || i == 5) expected_sampled += static_cast<int>(Tokens(results[0][i]).size()) - 1;
  }
  EXPECT_EQ(sampled_rows.load(), expected_sampled);
  (*fast)->Shutdown();
}

// Speculative decoding on a backend that samples (CUDA): a step with a draft verifies it with
// its logits on the host and rolls back; a step without one is sampled by the backend. Greedy
// tokens are those of plain decoding on the CPU.
TEST_F(ExecutorTest, SpeculationOnASamplingBackendVerifiesDraftsAndSamplesTheOtherSteps) {
  Load(kLmDir);
  Start();
  std::atomic<int> sampled_rows{0};
  SpeculationCounter drafts;
  ExecutorOptions options;
  options.speculative = {SpeculativeMode::kNgram, 4};
  options.observer = &drafts;
  auto speculating = Executor::Create(std::make_unique<SelfSamplingBackend>(
                                          *model_, &sampled_rows, SelfSamplingBackend::Mode::kWork),
                                      *tokenizer_, options);
  ASSERT_TRUE(speculating.ok()) << speculating.status();
  std::vector<GenerationRequest> requests;
  for (const std::string prompt :
       {"Open file. Save file. Open file. Save file. Open file.", "a", "Quit without saving?"}) {
    GenerationRequest request;
    request.prompt = prompt;
    request.max_tokens = 24;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    requests.push_back(request);
  }
  for (const GenerationRequest& request : requests) {
    Collector plain, spec;
    ASSERT_TRUE(executor_->Enqueue(request, plain.Callback()).ok());
    ASSERT_TRUE((*speculating)->Enqueue(request, spec.Callback()).ok());
    const std::vector<GenerationEvent> expected = plain.Wait(), actual = spec.Wait();
    ASSERT_TRUE(actual.back().status.ok()) << actual.back().status;
    EXPECT_EQ(Tokens(actual), Tokens(expected)) << request.prompt;
    EXPECT_EQ(Tokens(actual).size(), 24u) << request.prompt;
  }
  EXPECT_GT(drafts.drafted_.load(), 0);
  EXPECT_GT(drafts.accepted_.load(), 0);
  EXPECT_GT(sampled_rows.load(), 0);  // the steps without a draft
  (*speculating)->Shutdown();
}

TEST_F(ExecutorTest, BackendSamplingFailureEndsItsRequestsAndFreesTheirState) {
  Load(kLmDir);
  std::atomic<int> sampled_rows{0};
  auto failing = Executor::Create(std::make_unique<SelfSamplingBackend>(
                                      *model_, &sampled_rows, SelfSamplingBackend::Mode::kFail),
                                  *tokenizer_, {});
  ASSERT_TRUE(failing.ok()) << failing.status();
  GenerationRequest request;
  request.prompt = "This program is free software";
  request.max_tokens = 8;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  Collector collector;
  ASSERT_TRUE((*failing)->Enqueue(request, collector.Callback()).ok());
  const auto events = collector.Wait();
  EXPECT_EQ(events.back().status.code(), absl::StatusCode::kInternal) << events.back().status;
  EXPECT_EQ(Tokens(events).size(), 1u);  // the token sampled from the prompt's logits
  for (int i = 0; i < 200 && (*failing)->LatestStats().state_bytes_in_use != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*failing)->LatestStats().state_bytes_in_use, 0);
  // A failure the backend recovers from ends only its batch: the model still takes requests.
  EXPECT_TRUE((*failing)->LatestStats().backend_failure.empty());
  Collector next;
  EXPECT_TRUE((*failing)->Enqueue(request, next.Callback()).ok());
  next.Wait();
}

// A failure the backend cannot recover from (Health() reports it) ends every request, running or
// waiting, frees their state, and makes the Executor refuse new requests with UNAVAILABLE.
TEST_F(ExecutorTest, BackendThatBreaksEndsEverythingAndRefusesNewRequests) {
  Load(kLmDir);
  std::atomic<int> sampled_rows{0};
  ExecutorOptions options;
  options.max_running_sequences = 2;  // the other requests are still waiting when it breaks
  auto broken = Executor::Create(std::make_unique<SelfSamplingBackend>(
                                     *model_, &sampled_rows, SelfSamplingBackend::Mode::kBreak),
                                 *tokenizer_, options);
  ASSERT_TRUE(broken.ok()) << broken.status();
  GenerationRequest request;
  request.prompt = "This program is free software";
  request.max_tokens = 8;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  // Queued at once: one by one, the backend could break before the last Enqueue.
  std::vector<std::unique_ptr<Collector>> collectors;
  std::vector<GenerationRequest> requests;
  std::vector<EventCallback> callbacks;
  for (int i = 0; i < 5; ++i) {
    collectors.push_back(std::make_unique<Collector>());
    requests.push_back(request);
    callbacks.push_back(collectors.back()->Callback());
  }
  ASSERT_TRUE((*broken)->EnqueueBatch(std::move(requests), std::move(callbacks)).ok());
  int unavailable = 0;
  for (auto& collector : collectors) {
    const absl::Status status = collector->Wait().back().status;
    EXPECT_FALSE(status.ok());
    if (status.code() == absl::StatusCode::kUnavailable) {
      ++unavailable;
      EXPECT_NE(status.message().find("backend failed"), std::string::npos) << status;
      EXPECT_NE(status.message().find("device lost"), std::string::npos) << status;
    }
  }
  EXPECT_GE(unavailable, 3);  // at least the waiting ones
  EXPECT_EQ((*broken)->LatestStats().backend_failure, "device lost");
  // The figures are published right after the requests end.
  for (int i = 0; i < 200 && ((*broken)->LatestStats().state_bytes_in_use != 0 ||
                              (*broken)->LatestStats().waiting_requests != 0);
       ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*broken)->LatestStats().state_bytes_in_use, 0);
  EXPECT_EQ((*broken)->LatestStats().waiting_requests, 0);
  Collector refused;
  const absl::StatusOr<RequestId> id = (*broken)->Enqueue(request, refused.Callback());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnavailable) << id.status();
  EXPECT_NE(id.status().message().find("device lost"), std::string::npos) << id.status();
}

}  // namespace
}  // namespace abcd
