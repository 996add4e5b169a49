// FakeExecutor: a scripted Executor for the frontends' in-process tests (tests/server/http/,
// tests/server/grpc/). Each accepted request gets a thread that emits Behavior::pieces, then a
// last event; it records what reached it and what was cancelled. A real CpuBackend over the
// given model answers backend() (the frontends ask it for limits and names). GoldenModelSuite:
// the fixture base that loads that model (the golden dec_abc) once per test suite.
//
// Thread-safety: every member may be called from any thread; events are delivered on the
// request's own thread.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"

namespace abcd::testing {

// Scripted executor: each accepted request gets a thread that emits `pieces` (one event each,
// `piece_delay` apart) and then a last event with `reason` / `final_status`. Translation
// requests (source set) get one final event "<source>". Cancel ends a request with CANCELLED.
class FakeExecutor final : public Executor {
 public:
  struct Behavior {
    std::vector<std::string> pieces = {"Hello", ", ", "world"};
    FinishReason reason = FinishReason::kLength;
    absl::Status enqueue_status;  // not OK: Enqueue answers it
    absl::Status final_status;    // not OK: the last event carries it
    absl::Duration piece_delay = absl::ZeroDuration();
    bool until_cancelled = false;  // repeat the pieces (or stay silent) until Cancel
    int hold_until_enqueued = 0;   // emit nothing until this many requests were enqueued
  };

  explicit FakeExecutor(const Model& model) : backend_(model, 1 << 20) {}
  ~FakeExecutor() override { Shutdown(); }

  void set_behavior(Behavior behavior) {
    std::lock_guard<std::mutex> lock(mu_);
    behavior_ = std::move(behavior);
  }
  std::vector<GenerationRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  bool WasCancelled(RequestId id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_.count(id) > 0;
  }
  RequestId last_id() const {
    std::lock_guard<std::mutex> lock(mu_);
    return next_id_;
  }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!behavior_.enqueue_status.ok()) return behavior_.enqueue_status;
    const RequestId id = ++next_id_;
    requests_.push_back(request);
    threads_.emplace_back(
        [this, id, request = std::move(request), behavior = behavior_,
         callback = std::move(callback)] { Run(id, request, behavior, callback); });
    cv_.notify_all();
    return id;
  }
  void Cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(id);
    cv_.notify_all();
  }
  void StartDraining() override {}
  void Shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
  }
  ExecutorStats LatestStats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    ExecutorStats stats;
    stats.backend_failure = backend_failure_;
    return stats;
  }
  void set_backend_failure(std::string failure) {
    std::lock_guard<std::mutex> lock(mu_);
    backend_failure_ = std::move(failure);
  }
  const DecodeBackend& backend() const override { return backend_; }

 private:
  void Run(RequestId id, const GenerationRequest& request, const Behavior& behavior,
           const EventCallback& callback) {
    GenerationEvent last;
    last.finished = true;
    last.prompt_tokens = static_cast<int>(request.prompt.size() + request.source.size());
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(2), [&] {
            return requests_.size() >= static_cast<size_t>(behavior.hold_until_enqueued);
          })) {
        lock.unlock();
        last.status = absl::InternalError("the batch was not enqueued together");
        callback(std::move(last));
        return;
      }
    }
    if (!request.source.empty()) {
      last.text = absl::StrCat("<", request.source, ">");
      last.completion_tokens = 1;
      last.finish_reason = FinishReason::kEos;
      last.status = behavior.final_status;
      callback(std::move(last));
      return;
    }
    size_t emitted = 0;
    while (behavior.until_cancelled || emitted < behavior.pieces.size()) {
      const bool silent = behavior.pieces.empty();
      const absl::Duration wait = silent ? absl::Seconds(10) : behavior.piece_delay;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, absl::ToChronoNanoseconds(wait),
                     [&] { return cancelled_.count(id) > 0 || shutdown_; });
        if (cancelled_.count(id) > 0 || shutdown_) {
          lock.unlock();
          last.status = absl::CancelledError("cancelled");
          last.completion_tokens = static_cast<int>(emitted);
          callback(std::move(last));
          return;
        }
      }
      if (silent) break;
      GenerationEvent event;
      event.text = behavior.pieces[emitted % behavior.pieces.size()];
      event.token_ids = {static_cast<int32_t>(emitted)};
      callback(std::move(event));
      ++emitted;
    }
    last.finish_reason = behavior.reason;
    last.status = behavior.final_status;
    last.completion_tokens = static_cast<int>(emitted);
    callback(std::move(last));
  }

  CpuBackend backend_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Behavior behavior_;
  RequestId next_id_ = 0;
  std::vector<GenerationRequest> requests_;
  std::set<RequestId> cancelled_;
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
  std::string backend_failure_;
};

// A test suite whose executors (FakeExecutor, or a test's own) run over the golden dec_abc model
// (ABCD_FIXTURE_DIR/golden/dec_abc), loaded in SetUpTestSuite and freed in TearDownTestSuite:
// derive the fixture from it, ASSERT_NE(model_, nullptr) in SetUp and build executors over
// *model_.
class GoldenModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load(std::string(ABCD_FIXTURE_DIR) + "/golden/dec_abc");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  static inline Model* model_ = nullptr;
};

}  // namespace abcd::testing
