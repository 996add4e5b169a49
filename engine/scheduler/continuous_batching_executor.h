// The Executor implementation (internal to engine/scheduler): one engine thread, continuous
// batching over a DecodeBackend. Each iteration is plan -> run -> apply:
//   Step() = PlanIteration (iteration_plan.h: which rows, whose; plain data, no backend)
//            -> RunIteration (the backend calls) -> ApplyOutput (route tokens and logits).
// Files:
//   request_intake.{h,cc}            RequestIntake: validation, tokenization, sessions (any thread)
//   continuous_batching_executor.cc  queueing, the loop: admission, encoding, Step, stats
//   iteration_plan.{h,cc}            PlanIteration
//   apply_output.cc                  ApplyOutput: sampling, beams, choices, events, finishing
//   active_request.h                 the per-request record the loop keeps
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/active_request.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/iteration_plan.h"
#include "engine/scheduler/prefix_cache.h"
#include "engine/scheduler/request_intake.h"

namespace abcd {
namespace executor_internal {

// Prefixes shorter than this are not worth a snapshot: prefilling them costs about a restore.
inline constexpr int64_t kMinCachedPrefix = 3;

class ContinuousBatchingExecutor final : public Executor {
 public:
  ContinuousBatchingExecutor(std::unique_ptr<DecodeBackend> backend, const Tokenizer& tokenizer,
                             const ExecutorOptions& options);
  ~ContinuousBatchingExecutor() override { Shutdown(); }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override;
  absl::StatusOr<std::vector<RequestId>> EnqueueBatch(
      std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) override;
  absl::Status CheckInput(absl::string_view field, size_t bytes) const override {
    return intake_.CheckInput(field, bytes);
  }
  absl::Status CheckSessionState(absl::string_view blob) const override {
    return intake_.CheckSessionState(blob);
  }
  void Cancel(RequestId id) override {
    absl::MutexLock lock(&mu_);
    cancelled_.push_back(id);
  }
  void StartDraining() override {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    stats_.draining = true;
  }
  void Shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  ExecutorStats LatestStats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  const DecodeBackend& backend() const override { return *backend_; }

 private:
  // Queues prepared requests all or none.
  absl::StatusOr<std::vector<RequestId>> Queue(std::vector<std::unique_ptr<ActiveRequest>> rs);

  // --- the loop (continuous_batching_executor.cc): engine thread.
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !incoming_.empty() || !cancelled_.empty();
  }
  void Loop();
  // Feeds options_.warmup_tokens prompt rows through a scratch sequence (engine thread, before
  // the loop takes requests) and publishes how many went in (WarmupRows: 0 when skipped; any
  // failure only skips it).
  void Warmup();
  int64_t WarmupRows();
  void EndRequestsFromOutside(std::vector<RequestId> ids, const absl::Status& status);
  void ExpireDeadlines();
  // Prefix cache: plans r's start (a restored prefix, snapshot points). False: a running
  // request is about to store a longer prefix of r's prompt, so r waits for it.
  bool PlanPrefixReuse(ActiveRequest& r);
  void Admit();
  // Encodes at most one admitted source per iteration (see the turns in the definition).
  void EncodeSources();
  // One iteration: PlanIteration -> RunIteration -> ApplyOutput.
  void Step();
  // The backend calls of `plan` (logits into logits_), timed for the cost model.
  IterationOutput RunIteration(const IterationPlan& plan);
  // After prefill rows were folded: stores the prefix snapshots that are due.
  void StoreDueSnapshots();
  // A request that ends OK leaves the state after its prompt and generated tokens in the prefix
  // cache, so a client that resends the conversation (stateless multi-turn) restores all of it.
  void CacheFinalState(const ActiveRequest& r);
  void Publish(int64_t batch_size);
  // After a backend failure that Health() reports as permanent: ends every request with it and
  // refuses new ones.
  void CheckBackendHealth();

  // --- apply (apply_output.cc): engine thread.
  // Marks the plan's prefill progress, then hands each request its sampled token or its logits
  // rows; retires finished requests and publishes the iteration's stats.
  void ApplyOutput(const IterationPlan& plan, const IterationOutput& output);
  // r's logits rows of this iteration: a beam step, prompt scoring, the n-fork, or sampling.
  // Choices forked off r are appended to `choices`.
  void RouteLogits(ActiveRequest& r, std::span<const float> logits,
                   std::vector<std::unique_ptr<ActiveRequest>>* choices);
  // n > 1, after the prompt: forks the other choices off r (which becomes choice 0). They are
  // appended to `out`; false (and r finished) when a fork fails.
  bool ForkChoices(ActiveRequest& r, std::vector<std::unique_ptr<ActiveRequest>>* out);
  // Samples r's next token from one row of logits (and its log-probabilities) under r's
  // response_format mask, if any, and accepts it; returns it, or -1 when r ended instead (a
  // mask that allows nothing).
  int32_t Sample(ActiveRequest& r, std::span<const float> logits);
  // A decode step's logits: one row, or with a draft (speculation) one per verify row, sampled
  // in order while the draft agrees; the state then goes back to the last row kept.
  void SampleDecode(ActiveRequest& r, std::span<const float> logits);
  // Speculation: puts r's state back to verify row r.rollback_row (if any) and clears it.
  absl::Status RollBack(ActiveRequest& r);
  // request.prompt_logprobs: scores the prompt tokens this step's prefill rows predict.
  void ScorePrompt(ActiveRequest& r, std::span<const float> logits);
  // Moves what the next event carries besides tokens (log-probabilities) into `event`.
  void AttachLogprobs(ActiveRequest& r, GenerationEvent& event);
  // Takes `token` as r's next generated token: finish, or emit it and feed it next step.
  void Accept(ActiveRequest& r, int32_t token);
  void BeamStepFor(ActiveRequest& r, std::span<const float> logits);
  void FinishBeams(ActiveRequest& r);
  void Emit(ActiveRequest& r, std::vector<int32_t> tokens, std::string text);
  void Finish(ActiveRequest& r, absl::Status status, FinishReason reason,
              std::vector<int32_t> tokens = {}, std::string text = {});
  // The session blob of r's state (save_state), taken before its state is released.
  absl::StatusOr<std::string> SaveSession(const ActiveRequest& r);
  void ReleaseStates(ActiveRequest& r);
  void RecordToken(ActiveRequest& r);
  // The tokens' bytes for constrained output, built at the first request that needs them.
  std::shared_ptr<const TokenVocabulary> ConstraintVocabulary();

  const std::unique_ptr<DecodeBackend> backend_;  // engine thread only (but constant accessors)
  const ModelConfig& config_;
  const Tokenizer& tokenizer_;
  const ExecutorOptions options_;
  const RequestIntake intake_;
  const int64_t capacity_bytes_;
  const bool backend_samples_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<ActiveRequest>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancelled_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // accepted, not yet admitted
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status backend_failure_ ABSL_GUARDED_BY(mu_);  // UNAVAILABLE once the backend failed
  ExecutorStats stats_ ABSL_GUARDED_BY(mu_);

  // Engine thread only.
  std::deque<std::unique_ptr<ActiveRequest>> waiting_;
  std::vector<std::unique_ptr<ActiveRequest>> running_;
  std::vector<float> logits_;  // the engine thread's step logits, reused
  std::vector<float> logprob_scratch_;
  std::shared_ptr<const TokenVocabulary> constraint_vocabulary_;  // see ConstraintVocabulary
  int64_t reserved_bytes_ = 0;
  int64_t iterations_ = 0;
  bool encode_oldest_next_ = true;  // EncodeSources alternates oldest and shortest turns
  int64_t encode_credit_ = 0;       // source tokens the oldest may be encoded with
  StepCostModel costs_;             // kTime: what a decode row and a prompt row take
  PlanParams plan_params_;          // PlanIteration's (reads costs_)
  PrefixCache prefix_cache_;
  PrefixCacheCounters prefix_counters_;  // admitted requests' lookups
  std::thread thread_;
};

}  // namespace executor_internal
}  // namespace abcd
