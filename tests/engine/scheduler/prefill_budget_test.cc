// Prefill sized from time: with a backend whose Decode sleeps in proportion to its rows, a long
// prompt admitted next to running streams adds at most about one decode step to an iteration
// under the time policy (the prompt goes in many small chunks), and stalls them for the whole
// prompt under the token policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/scheduler/executor.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::kLmDir;

constexpr double kFixedMs = 8;   // every Decode call
constexpr double kPerRowMs = 2;  // each row, decode or prompt

// What one Decode call was given.
struct Call {
  int64_t rows = 0;
  int64_t logits_rows = 0;  // decode rows and the last row of each finished prompt
  double model_ms = 0;      // the time it slept: kFixedMs + kPerRowMs * rows
};

// Sequences are ids only; Decode sleeps kFixedMs + kPerRowMs per row and answers logits whose
// argmax is a fixed ordinary token. Calls are recorded while `recording` is set.
class SleepingBackend final : public DecodeBackend {
 public:
  explicit SleepingBackend(const ModelConfig& config) : config_(config) {}
  std::string name() const override { return "sleeping"; }
  std::string device_description() const override { return "test"; }
  const ModelConfig& config() const override { return config_; }
  int64_t weight_bytes() const override { return 0; }
  int64_t state_bytes_per_sequence() const override { return 1; }
  absl::StatusOr<int64_t> RequestBytes(int64_t, int64_t, int64_t, int sequences) const override {
    return sequences;
  }
  int64_t capacity_bytes() const override { return 1 << 20; }
  BackendMemory memory() const override {
    absl::MutexLock lock(&mu_);
    return {live_, live_, 0};
  }
  absl::StatusOr<SequenceId> Acquire() override {
    absl::MutexLock lock(&mu_);
    ++live_;
    return next_++;
  }
  void Release(SequenceId) override {
    absl::MutexLock lock(&mu_);
    --live_;
  }
  absl::StatusOr<SequenceId> Fork(SequenceId) override {
    return absl::UnimplementedError("no beams here");
  }
  absl::Status Encode(std::span<const int32_t>, SequenceId) override {
    return absl::UnimplementedError("decoder only");
  }
  absl::Status Decode(std::span<const DecodeRow> rows, std::vector<float>* logits) override {
    Call call;
    call.rows = static_cast<int64_t>(rows.size());
    for (const DecodeRow& row : rows) call.logits_rows += row.want_logits;
    call.model_ms = kFixedMs + kPerRowMs * static_cast<double>(call.rows);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(call.model_ms));
    for (int64_t i = 0; i < call.logits_rows; ++i) {
      std::vector<float> row(config_.vocab_size, 0.0f);
      row[kToken] = 1.0f;
      logits->insert(logits->end(), row.begin(), row.end());
    }
    if (recording.load()) {
      absl::MutexLock lock(&mu_);
      calls_.push_back(call);
    }
    return absl::OkStatus();
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  std::atomic<bool> recording{false};

 private:
  static constexpr int32_t kToken = 10;
  const ModelConfig config_;
  mutable absl::Mutex mu_;
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;
  SequenceId next_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// Counts a request's events and remembers its last one.
class Stream {
 public:
  EventCallback Callback() {
    return [this](GenerationEvent event) {
      std::lock_guard<std::mutex> lock(mu_);
      ++events_;
      if (event.finished) last_ = event;
      cv_.notify_all();
    };
  }
  void WaitForEvents(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return events_ >= n || last_.finished; });
  }
  GenerationEvent WaitForEnd() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return last_.finished; });
    return last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int events_ = 0;
  GenerationEvent last_;
};

struct Outcome {
  std::vector<Call> calls;  // while the long prompt was prefilled
  GenerationEvent long_prompt_end;
};

// Counts the iterations overdue prompts widened.
class OverdueCounter final : public ExecutorObserver {
 public:
  void OnOverduePrefill() override { ++widened; }
  std::atomic<int> widened{0};
};

// Two streams decode; then a long prompt arrives. Returns the Decode calls made until the long
// prompt finished. `deadline_ms`: ExecutorOptions::prefill_deadline_ms (0: off, so the time
// policy alone sizes the chunks).
Outcome RunLongPromptBesideTwoStreams(PrefillPolicy policy, double deadline_ms = 0,
                                      ExecutorObserver* observer = nullptr) {
  Outcome outcome;
  auto model = Model::Load(kLmDir);
  auto tokenizer = Tokenizer::Load(kLmDir + "/tokenizer.model");
  EXPECT_TRUE(model.ok() && tokenizer.ok());
  if (!model.ok() || !tokenizer.ok()) return outcome;
  auto backend = std::make_unique<SleepingBackend>((*model)->config());
  SleepingBackend* sleeping = backend.get();
  ExecutorOptions options;
  options.prefill_policy = policy;
  options.prefill_deadline_ms = deadline_ms;
  options.observer = observer;
  auto executor = Executor::Create(std::move(backend), **tokenizer, options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  if (!executor.ok()) return outcome;

  Stream streams[2];
  std::vector<RequestId> ids;
  for (Stream& stream : streams) {
    GenerationRequest request;
    request.prompt = "A short prompt";
    request.max_tokens = 4000;
    request.ignore_eos = true;
    auto id = (*executor)->Enqueue(request, stream.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  // Enough decode steps for the cost model to have seen them.
  for (Stream& stream : streams) stream.WaitForEvents(6);

  GenerationRequest request;
  for (int i = 0; i < 8; ++i) request.prompt += "the quick brown fox jumps over a lazy dog ";
  request.max_tokens = 2;
  request.ignore_eos = true;
  Stream long_prompt;
  sleeping->recording = true;
  EXPECT_TRUE((*executor)->Enqueue(request, long_prompt.Callback()).ok());
  outcome.long_prompt_end = long_prompt.WaitForEnd();
  sleeping->recording = false;
  outcome.calls = sleeping->calls();
  for (RequestId id : ids) (*executor)->Cancel(id);
  for (Stream& stream : streams) stream.WaitForEnd();
  (*executor)->Shutdown();
  return outcome;
}

// The worst iteration next to the running streams, as a multiple of a decode step of theirs.
double WorstStallRatio(const std::vector<Call>& calls) {
  double worst = 0;
  for (const Call& call : calls) {
    if (call.logits_rows < 2) continue;  // the streams were not both decoding
    const double decode_step = kFixedMs + kPerRowMs * 2;
    worst = std::max(worst, call.model_ms / decode_step);
  }
  return worst;
}

TEST(PrefillBudget, TimePolicyAddsAboutOneDecodeStepPerIteration) {
  const Outcome outcome = RunLongPromptBesideTwoStreams(PrefillPolicy::kTime);
  ASSERT_TRUE(outcome.long_prompt_end.status.ok()) << outcome.long_prompt_end.status;
  EXPECT_GE(outcome.long_prompt_end.prompt_tokens, 100);
  EXPECT_EQ(outcome.long_prompt_end.completion_tokens, 2);
  // The prompt went in many chunks, each next to the streams' decode rows.
  int64_t prompt_rows = 0;
  int mixed = 0;
  for (const Call& call : outcome.calls) {
    prompt_rows += call.rows - call.logits_rows;
    mixed += call.rows > call.logits_rows && call.logits_rows >= 2;
  }
  EXPECT_GE(prompt_rows, outcome.long_prompt_end.prompt_tokens - 1);
  EXPECT_GE(mixed, 5);
  // One decode step of the two streams is 12 ms; prefill may add one decode step of the whole
  // batch, the prompt's sequence included (3 rows: 18 ms at the fitted 6 ms a row, the fixed
  // cost spread over the rows), so 2.5 steps; 3 allows for a loaded machine's sleep overshoot,
  // which the estimates see as cost.
  const double worst = WorstStallRatio(outcome.calls);
  std::printf("%d prompt tokens in %d iterations beside both streams, worst %.2f decode steps\n",
              outcome.long_prompt_end.prompt_tokens, mixed, worst);
  EXPECT_LE(worst, 3.0);
}

// The TTFT bound: once the long prompt has waited past the deadline (20 ms, a couple of
// iterations here), the rest of it goes in one iteration beside the streams instead of some
// ten more small chunks, and the observer hears of it.
TEST(PrefillBudget, OverduePromptGoesInWholeBesideTheStreams) {
  OverdueCounter counter;
  const Outcome outcome = RunLongPromptBesideTwoStreams(PrefillPolicy::kTime, 20, &counter);
  ASSERT_TRUE(outcome.long_prompt_end.status.ok()) << outcome.long_prompt_end.status;
  ASSERT_GE(outcome.long_prompt_end.prompt_tokens, 100);
  int64_t largest = 0;
  for (const Call& call : outcome.calls) {
    if (call.logits_rows >= 2) largest = std::max(largest, call.rows - call.logits_rows);
  }
  // The time policy alone feeds some 3-15 tokens an iteration here (the test above).
  EXPECT_GE(largest, outcome.long_prompt_end.prompt_tokens / 2);
  EXPECT_GE(counter.widened.load(), 1);
}

TEST(PrefillBudget, TokenPolicyStallsRunningStreamsForTheWholePrompt) {
  const Outcome outcome = RunLongPromptBesideTwoStreams(PrefillPolicy::kTokens);
  ASSERT_TRUE(outcome.long_prompt_end.status.ok()) << outcome.long_prompt_end.status;
  // All of the prompt in one iteration beside the streams: over ten decode steps long.
  EXPECT_GE(WorstStallRatio(outcome.calls), 10.0);
}

TEST(PrefillBudget, BadBudgetsAreRefusedNamingTheOption) {
  auto model = Model::Load(kLmDir);
  auto tokenizer = Tokenizer::Load(kLmDir + "/tokenizer.model");
  ASSERT_TRUE(model.ok() && tokenizer.ok());
  ExecutorOptions options;
  options.iteration_budget_ms = -1;
  auto executor =
      Executor::Create(std::make_unique<SleepingBackend>((*model)->config()), **tokenizer, options);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("iteration_budget_ms"), std::string::npos);
  options.iteration_budget_ms = 0;
  options.prefill_step_share = 0;
  executor =
      Executor::Create(std::make_unique<SleepingBackend>((*model)->config()), **tokenizer, options);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("prefill_step_share"), std::string::npos);
  options.prefill_step_share = 1;
  options.prefill_deadline_ms = -1;
  executor =
      Executor::Create(std::make_unique<SleepingBackend>((*model)->config()), **tokenizer, options);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(executor.status().message().find("prefill_deadline_ms"), std::string::npos);
}

}  // namespace
}  // namespace abcd
