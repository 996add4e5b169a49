// The Executor implementation (internal to engine/scheduler): one engine thread, continuous
// batching over a DecodeBackend. Split over three files:
//   continuous_batching_executor.cc  the loop: admission, encoding, the batched step
//   executor_intake.cc               validation, tokenization, sessions, queueing (any thread)
//   executor_events.cc               sampling, beams, choices, events and finishing (engine thread)
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/prefix_cache.h"
#include "engine/scheduler/text_stream.h"
#include "engine/state/sequence_blob.h"

namespace abcd {
namespace executor_internal {

inline constexpr int kMaxBeamSize = 16;
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopLength = 256;
// Prefixes shorter than this are not worth a snapshot: prefilling them costs about a restore.
inline constexpr int64_t kMinCachedPrefix = 3;

struct Beam {
  SequenceId sequence = 0;
  std::vector<int32_t> tokens;
  double score = 0.0;
};

// The choices of one request (n >= 1) report through one callback: each choice's events carry
// its index, and the request's last event follows the last choice's.
struct ChoiceGroup {
  EventCallback callback;
  int n = 1;
  int open = 1;         // choices not finished yet (unforked ones included)
  absl::Status status;  // the first error of any choice
  int completion_tokens = 0;
};

struct ActiveRequest {
  RequestId id = 0;  // shared by the choices of one request
  int index = 0;     // the choice
  GenerationRequest request;
  std::shared_ptr<ChoiceGroup> group;
  std::vector<int32_t> prompt_ids;  // decoder input: [session history +] bos + prompt
  std::vector<int32_t> source_ids;  // encoder input, ends with eos (encoder-decoder)
  int64_t history_tokens = 0;       // prompt_ids taken from a session (not this request's)
  int64_t reserved_bytes = 0;
  absl::Time enqueued;
  absl::Time last_token;
  bool any_token = false;
  bool admitted = false;  // reserved_bytes counted against the budget
  bool encoded = false;   // the source is in the cross-attention memory (or there is none)
  bool done = false;
  bool forked = false;  // n > 1: the other choices exist (the first has forked its state)

  // A state to start from instead of an empty one (StatePool snapshot bytes): a session's or a
  // prefix cache hit's; `prefilled` then starts at its position.
  std::shared_ptr<const std::string> restore_state;
  int64_t cached_tokens = 0;  // prompt tokens restored from the prefix cache
  // Prefix cache: take a snapshot once prefill reaches this position (0: none; a pending mark
  // is held in the cache meanwhile), and one at the prompt's last token (snapshot_end_at = its
  // length - 1, so an exact repeat restores all but that token), each where prefill stops.
  int64_t snapshot_at = 0;
  int64_t snapshot_end_at = 0;
  bool cache_checked = false;  // the prefix cache was consulted (once, at admission)

  SequenceId sequence = 0;  // sampling path; beam path during prefill
  bool has_sequence = false;
  int64_t prefilled = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;
  std::vector<int32_t> context;  // history + prompt + generated (repetition penalty, sessions)
  int32_t pending_token = -1;    // sampled last step, fed in the next decode

  // Log-probabilities: of the token sampled last (request.logprobs >= 0), and of the prompt
  // (request.prompt_logprobs) until the first event carries them.
  std::optional<TokenLogprobs> token_logprobs;
  std::vector<TokenLogprobs> prompt_scores;
  bool prompt_scores_sent = false;
  bool preceding_sent = false;  // GenerationEvent::preceding_token_ids went out
  int64_t chunk_start = 0;      // where this step's prefill rows began
  int64_t chunk_rows = 0;       // prefill rows this step (0: a decode row, or none)

  std::vector<Beam> beams;  // beam path (beam_size > 1)
  std::vector<Beam> finished_beams;
  int beam_steps = 0;

  bool beam_search() const { return request.beam_size > 1; }
  bool prefill_done() const { return prefilled == static_cast<int64_t>(prompt_ids.size()); }
  int prompt_tokens() const {
    return static_cast<int>(static_cast<int64_t>(prompt_ids.size() + source_ids.size()) -
                            history_tokens);
  }
  int generated_tokens() const { return static_cast<int>(context.size() - prompt_ids.size()); }
};

class ContinuousBatchingExecutor final : public Executor {
 public:
  ContinuousBatchingExecutor(std::unique_ptr<DecodeBackend> backend, const Tokenizer& tokenizer,
                             const ExecutorOptions& options);
  ~ContinuousBatchingExecutor() override { Shutdown(); }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override;
  absl::StatusOr<std::vector<RequestId>> EnqueueBatch(
      std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) override;
  absl::Status CheckInput(absl::string_view field, size_t bytes) const override {
    return CheckInputBytes(field, bytes, InputTokenLimit());
  }
  absl::Status CheckSessionState(absl::string_view blob) const override;
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
  // --- intake (executor_intake.cc): any thread, no lock held unless stated.
  absl::Status Validate(const GenerationRequest& request) const;
  int64_t InputTokenLimit() const {
    return config_.is_encoder_decoder() ? options_.max_source_tokens : options_.max_prompt_tokens;
  }
  // The prompt's tokens (without bos): its text tokenized, or its ids checked.
  absl::StatusOr<std::vector<int32_t>> PromptTokens(const GenerationRequest& request) const;
  // A session blob with every check CheckSessionState makes.
  absl::StatusOr<SequenceBlob> DecodeSession(absl::string_view bytes) const;
  // Puts a session's history and state into `r` (request.resume_state).
  absl::Status Resume(ActiveRequest& r) const;
  // Validates and tokenizes one request; Enqueue's work before queueing.
  absl::StatusOr<std::unique_ptr<ActiveRequest>> Prepare(GenerationRequest request,
                                                         EventCallback callback) const;
  // Queues prepared requests all or none.
  absl::StatusOr<std::vector<RequestId>> Queue(std::vector<std::unique_ptr<ActiveRequest>> rs);

  // --- the loop (continuous_batching_executor.cc): engine thread.
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !incoming_.empty() || !cancelled_.empty();
  }
  void Loop();
  void EndRequestsFromOutside(std::vector<RequestId> ids, const absl::Status& status);
  void ExpireDeadlines();
  // Prefix cache: plans r's start (a restored prefix, snapshot points). False: a running
  // request is about to store a longer prefix of r's prompt, so r waits for it.
  bool PlanPrefixReuse(ActiveRequest& r);
  void Admit();
  // Encodes at most one admitted source per iteration (see the turns in the definition).
  void EncodeSources();
  void Step();
  // After prefill rows were folded: stores the prefix snapshots that are due.
  void StoreDueSnapshots();
  // A request that ends OK leaves the state after its prompt and generated tokens in the prefix
  // cache, so a client that resends the conversation (stateless multi-turn) restores all of it.
  void CacheFinalState(const ActiveRequest& r);
  void Publish(int64_t batch_size);
  // After a backend failure that Health() reports as permanent: ends every request with it and
  // refuses new ones.
  void CheckBackendHealth();

  // --- events (executor_events.cc): engine thread.
  // n > 1, after the prompt: forks the other choices off r (which becomes choice 0). They are
  // appended to `out`; false (and r finished) when a fork fails.
  bool ForkChoices(ActiveRequest& r, std::vector<std::unique_ptr<ActiveRequest>>* out);
  void Sample(ActiveRequest& r, std::span<const float> logits);
  // request.prompt_logprobs: scores the prompt tokens this step's prefill rows predict.
  void ScorePrompt(ActiveRequest& r, std::span<const float> logits);
  // Moves what the next event carries besides tokens (log-probabilities) into `event`.
  void AttachLogprobs(ActiveRequest& r, GenerationEvent& event);
  // Takes `token` as r's next generated token: finish, or emit it and feed it next step.
  void Accept(ActiveRequest& r, int32_t token);
  // The backend samples r's next token itself (no host-side penalty needs the logits).
  bool SampledByBackend(const ActiveRequest& r) const {
    return backend_samples_ && !r.beam_search() && !NeedsHostSampling(r.request.sampling) &&
           r.request.logprobs < 0;
  }
  void BeamStepFor(ActiveRequest& r, std::span<const float> logits);
  void FinishBeams(ActiveRequest& r);
  void Emit(ActiveRequest& r, std::vector<int32_t> tokens, std::string text);
  void Finish(ActiveRequest& r, absl::Status status, FinishReason reason,
              std::vector<int32_t> tokens = {}, std::string text = {});
  // The session blob of r's state (save_state), taken before its state is released.
  absl::StatusOr<std::string> SaveSession(const ActiveRequest& r);
  void ReleaseStates(ActiveRequest& r);
  void RecordToken(ActiveRequest& r);

  const std::unique_ptr<DecodeBackend> backend_;  // engine thread only (but constant accessors)
  const ModelConfig& config_;
  const Tokenizer& tokenizer_;
  const ExecutorOptions options_;
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
  int64_t reserved_bytes_ = 0;
  int64_t iterations_ = 0;
  bool encode_oldest_next_ = true;  // EncodeSources alternates oldest and shortest turns
  int64_t encode_credit_ = 0;       // source tokens the oldest may be encoded with
  StepCostModel costs_;             // kTime: what a decode row and a prompt row take
  PrefixCache prefix_cache_;
  PrefixCacheCounters prefix_counters_;  // admitted requests' lookups
  std::thread thread_;
};

}  // namespace executor_internal
}  // namespace abcd
