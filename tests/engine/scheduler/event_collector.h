// Collects one request's GenerationEvents from the Executor's callback (any thread) and waits
// for the last one. Thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/scheduler/executor.h"

namespace abcd::testing {

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

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<GenerationEvent> events_;
};

}  // namespace abcd::testing
