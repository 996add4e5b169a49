// A request's GenerationEvents as the scheduler tests read them: Collector gathers them from the
// Executor's callback (any thread; thread-safe) and waits for the last one; Tokens and
// ChoiceOutputs join them per choice (plain functions of the events); SpeculationCounter sums
// what speculative decoding drafted and kept.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler/executor.h"

namespace abcd::testing {

// Counts what speculative decoding drafted and kept (ExecutorOptions::observer).
class SpeculationCounter : public ExecutorObserver {
 public:
  void OnSpeculation(int drafted, int accepted) override {
    drafted_ += drafted;
    accepted_ += accepted;
  }
  std::atomic<int64_t> drafted_{0}, accepted_{0};
};

class Collector {
 public:
  EventCallback Callback() {
    return [this](GenerationEvent event) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(event));
      if (events_.back().finished) done_.notify_all();
    };
  }
  std::vector<GenerationEvent> Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return !events_.empty() && events_.back().finished; });
    return events_;
  }
  // Events received so far.
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<GenerationEvent> events_;
};

// The token ids of choice `index`, in order.
inline std::vector<int32_t> Tokens(const std::vector<GenerationEvent>& events, int index = 0) {
  std::vector<int32_t> out;
  for (const auto& e : events) {
    if (e.index == index) out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
  }
  return out;
}

// One choice's output, as a client sees it.
struct ChoiceOutput {
  std::vector<int32_t> tokens;
  std::string text;
  bool finished = false;                        // the choice's last event arrived
  FinishReason reason = FinishReason::kLength;  // from the choice's last event
  std::vector<float> logprobs;                  // the chosen tokens', with request.logprobs >= 0
  std::vector<int32_t> preceding;               // the first preceding_token_ids sent
  std::string saved_state;
  // The first error among the choice's events and the request's last event; OK if none.
  absl::Status status;
};

// The events of one request with `n` choices, joined per choice. With n > 1 the request's own
// last event (index 0, no tokens) only contributes its status, to every choice.
inline std::vector<ChoiceOutput> ChoiceOutputs(const std::vector<GenerationEvent>& events, int n) {
  std::vector<ChoiceOutput> out(static_cast<size_t>(n));
  for (const GenerationEvent& e : events) {
    if (e.index < 0 || e.index >= n) {
      ADD_FAILURE() << "event for choice " << e.index << " of a request with n = " << n;
      continue;
    }
    if (e.finished) {
      for (ChoiceOutput& o : out) o.status.Update(e.status);
    }
    if (e.finished && n > 1 && e.token_ids.empty() && e.text.empty()) continue;  // request end
    ChoiceOutput& o = out[static_cast<size_t>(e.index)];
    o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    o.text += e.text;
    for (const TokenLogprobs& l : e.logprobs) o.logprobs.push_back(l.logprob);
    if (e.choice_finished) {
      o.finished = true;
      o.reason = e.finish_reason;
    }
    if (o.preceding.empty()) o.preceding = e.preceding_token_ids;
    if (!e.saved_state.empty()) o.saved_state = e.saved_state;
    o.status.Update(e.status);
  }
  return out;
}

}  // namespace abcd::testing
