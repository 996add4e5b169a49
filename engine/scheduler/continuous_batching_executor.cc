// The Executor implementation: one engine thread, continuous batching over a DecodeBackend.
#include <chrono>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend/cpu_backend.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/beam_search.h"
#include "engine/scheduler/capacity_scheduler.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/text_stream.h"

namespace abcd {
namespace {

constexpr int kMaxBeamSize = 16;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopLength = 256;

struct Beam {
  SequenceId sequence = 0;
  std::vector<int32_t> tokens;
  double score = 0.0;
};

struct ActiveRequest {
  RequestId id = 0;
  GenerationRequest request;
  EventCallback callback;
  std::vector<int32_t> prompt_ids;  // decoder prompt, starts with bos
  std::vector<int32_t> source_ids;  // encoder input, ends with eos (encoder-decoder)
  int64_t reserved_bytes = 0;
  absl::Time enqueued;
  absl::Time last_token;
  bool any_token = false;
  bool admitted = false;  // reserved_bytes counted against the budget
  bool encoded = false;   // the source is in the cross-attention memory (or there is none)
  bool done = false;

  SequenceId sequence = 0;  // sampling path; beam path during prefill
  bool has_sequence = false;
  int64_t prefilled = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;
  std::vector<int32_t> context;  // prompt + generated, for the repetition penalty
  int32_t pending_token = -1;    // sampled last step, fed in the next decode

  std::vector<Beam> beams;  // beam path (beam_size > 1)
  std::vector<Beam> finished_beams;
  int beam_steps = 0;

  bool beam_search() const { return request.beam_size > 1; }
  bool prefill_done() const { return prefilled == static_cast<int64_t>(prompt_ids.size()); }
  int prompt_tokens() const { return static_cast<int>(prompt_ids.size() + source_ids.size()); }
};

class ContinuousBatchingExecutor final : public Executor {
 public:
  ContinuousBatchingExecutor(std::unique_ptr<DecodeBackend> backend, const Tokenizer& tokenizer,
                             const ExecutorOptions& options)
      : backend_(std::move(backend)),
        config_(backend_->config()),
        tokenizer_(tokenizer),
        options_(options),
        capacity_bytes_(backend_->capacity_bytes()),
        backend_samples_(backend_->samples_tokens()) {
    stats_.state_bytes_capacity = capacity_bytes_;
    thread_ = std::thread([this] { Loop(); });
  }
  ~ContinuousBatchingExecutor() override { Shutdown(); }

  absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) override;
  absl::StatusOr<std::vector<RequestId>> EnqueueBatch(
      std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) override;
  absl::Status CheckInput(absl::string_view field, size_t bytes) const override {
    return CheckInputBytes(field, bytes, InputTokenLimit());
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
  absl::Status Validate(const GenerationRequest& request) const;
  int64_t InputTokenLimit() const {
    return config_.is_encoder_decoder() ? options_.max_source_tokens : options_.max_prompt_tokens;
  }
  // Validates and tokenizes one request (no lock held); Enqueue's work before queueing.
  absl::StatusOr<std::unique_ptr<ActiveRequest>> Prepare(GenerationRequest request,
                                                         EventCallback callback) const;
  // Queues prepared requests all or none.
  absl::StatusOr<std::vector<RequestId>> Queue(std::vector<std::unique_ptr<ActiveRequest>> rs);
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !incoming_.empty() || !cancelled_.empty();
  }
  void Loop();
  void EndRequestsFromOutside(std::vector<RequestId> ids, const absl::Status& status);
  void ExpireDeadlines();
  void Admit();
  // Encodes at most one admitted source per iteration (see the turns in the definition).
  void EncodeSources();
  void Step();
  void Sample(ActiveRequest& r, std::span<const float> logits);
  // Takes `token` as r's next generated token: finish, or emit it and feed it next step.
  void Accept(ActiveRequest& r, int32_t token);
  // The backend samples r's next token itself (no host-side penalty needs the logits).
  bool SampledByBackend(const ActiveRequest& r) const {
    return backend_samples_ && !r.beam_search() && r.request.sampling.repetition_penalty == 1.0f;
  }
  void BeamStepFor(ActiveRequest& r, std::span<const float> logits);
  void FinishBeams(ActiveRequest& r);
  void Emit(ActiveRequest& r, std::vector<int32_t> tokens, std::string text);
  void Finish(ActiveRequest& r, absl::Status status, FinishReason reason,
              std::vector<int32_t> tokens = {}, std::string text = {});
  void ReleaseStates(ActiveRequest& r);
  void RecordToken(ActiveRequest& r);
  void Publish(int64_t batch_size);
  // After a backend failure that Health() reports as permanent: ends every request with it and
  // refuses new ones. Engine thread.
  void CheckBackendHealth();

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
  int64_t reserved_bytes_ = 0;
  int64_t iterations_ = 0;
  bool encode_oldest_next_ = true;  // EncodeSources alternates oldest and shortest turns
  int64_t encode_credit_ = 0;       // source tokens the oldest may be encoded with
  StepCostModel costs_;             // kTime: what a decode row and a prompt row take
  std::thread thread_;
};

absl::Status ContinuousBatchingExecutor::Validate(const GenerationRequest& request) const {
  const bool encoder_decoder = config_.is_encoder_decoder();
  if (encoder_decoder) {
    if (request.source.empty()) return absl::InvalidArgumentError("text must not be empty");
  } else if (request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt must not be empty");
  }
  if (request.max_tokens < 1 || request.max_tokens > options_.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens must be in [1, ", options_.max_new_tokens, "], got ", request.max_tokens));
  }
  ABCD_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  if (request.beam_size < 1 || request.beam_size > kMaxBeamSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_size must be in [1, ", kMaxBeamSize, "], got ", request.beam_size));
  }
  if (request.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop has ", request.stop.size(), " strings, at most ", kMaxStopStrings));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    if (request.stop[i].empty() || request.stop[i].size() > kMaxStopLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] must be 1 to ", kMaxStopLength, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ActiveRequest>> ContinuousBatchingExecutor::Prepare(
    GenerationRequest request, EventCallback callback) const {
  ABCD_RETURN_IF_ERROR(Validate(request));
  const ModelConfig& config = config_;
  const bool encoder_decoder = config.is_encoder_decoder();
  const absl::string_view field = encoder_decoder ? "text" : "prompt";
  const std::string& input = encoder_decoder ? request.source : request.prompt;
  // Refusal before work: the size bounds the tokens, so a hopeless text is never tokenized.
  ABCD_RETURN_IF_ERROR(CheckInput(field, input.size()));
  auto r = std::make_unique<ActiveRequest>();
  r->prompt_ids.push_back(config.bos_id);
  ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_.Encode(input));
  if (encoder_decoder) {
    r->source_ids = std::move(ids);
    r->source_ids.push_back(config.eos_id);
    if (static_cast<int64_t>(r->source_ids.size()) > options_.max_source_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("text is ", r->source_ids.size(),
                                                     " tokens, longer than the limit of ",
                                                     options_.max_source_tokens));
    }
  } else {
    r->prompt_ids.insert(r->prompt_ids.end(), ids.begin(), ids.end());
  }
  r->encoded = r->source_ids.empty();
  const int64_t input_tokens = static_cast<int64_t>(r->prompt_ids.size() + r->source_ids.size());
  if (input_tokens > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", input_tokens,
                                                   " tokens, longer than the limit of ",
                                                   options_.max_prompt_tokens));
  }
  const int sequences = request.beam_size > 1 ? 2 * request.beam_size : 1;
  // RequestBytes() only reads constants of the backend, so this thread may call it.
  absl::StatusOr<int64_t> bytes = backend_->RequestBytes(static_cast<int64_t>(r->prompt_ids.size()),
                                                         static_cast<int64_t>(r->source_ids.size()),
                                                         request.max_tokens, sequences);
  if (absl::IsResourceExhausted(bytes.status())) {
    // Waiting cannot help: a client error, not an overload to retry.
    return absl::InvalidArgumentError(
        absl::StrCat("request can never fit: ", bytes.status().message()));
  }
  ABCD_RETURN_IF_ERROR(bytes.status());
  r->reserved_bytes = *bytes;
  r->request = std::move(request);
  r->callback = std::move(callback);
  r->enqueued = absl::Now();
  r->context = r->prompt_ids;
  return r;
}

absl::StatusOr<std::vector<RequestId>> ContinuousBatchingExecutor::Queue(
    std::vector<std::unique_ptr<ActiveRequest>> rs) {
  absl::MutexLock lock(&mu_);
  if (!backend_failure_.ok()) return backend_failure_;
  if (draining_ || stopping_) return absl::UnavailableError("server is draining");
  const int64_t n = static_cast<int64_t>(rs.size());
  if (queued_ + n > options_.max_waiting_requests) {
    return absl::ResourceExhaustedError(absl::StrCat("overloaded: ", queued_,
                                                     " requests are already waiting (limit ",
                                                     options_.max_waiting_requests, ")"));
  }
  std::vector<RequestId> ids;
  for (auto& r : rs) {
    r->id = next_id_++;
    ++queued_;
    ids.push_back(r->id);
    incoming_.push_back(std::move(r));
  }
  return ids;
}

absl::StatusOr<RequestId> ContinuousBatchingExecutor::Enqueue(GenerationRequest request,
                                                              EventCallback callback) {
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<ActiveRequest> r,
                        Prepare(std::move(request), std::move(callback)));
  std::vector<std::unique_ptr<ActiveRequest>> rs;
  rs.push_back(std::move(r));
  ABCD_ASSIGN_OR_RETURN(std::vector<RequestId> ids, Queue(std::move(rs)));
  return ids.front();
}

absl::StatusOr<std::vector<RequestId>> ContinuousBatchingExecutor::EnqueueBatch(
    std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) {
  if (requests.size() != callbacks.size() || requests.empty()) {
    return absl::InvalidArgumentError("a batch needs one callback per request, at least one");
  }
  // Bytes first, so the total is refused before any text is tokenized.
  const bool encoder_decoder = config_.is_encoder_decoder();
  size_t total_bytes = 0;
  for (const GenerationRequest& request : requests) {
    total_bytes += (encoder_decoder ? request.source : request.prompt).size();
  }
  if (encoder_decoder) {
    ABCD_RETURN_IF_ERROR(
        CheckInputBytes("texts (together)", total_bytes, options_.max_batch_source_tokens));
  }
  std::vector<std::unique_ptr<ActiveRequest>> rs;
  int64_t source_tokens = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<std::unique_ptr<ActiveRequest>> r =
        Prepare(std::move(requests[i]), std::move(callbacks[i]));
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("texts[", i, "]: ", r.status().message()));
    }
    source_tokens += static_cast<int64_t>((*r)->source_ids.size());
    rs.push_back(*std::move(r));
  }
  if (encoder_decoder && source_tokens > options_.max_batch_source_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("texts are ", source_tokens,
                                                   " tokens together, more than the limit of ",
                                                   options_.max_batch_source_tokens));
  }
  return Queue(std::move(rs));
}

void ContinuousBatchingExecutor::Loop() {
  while (true) {
    std::vector<RequestId> cancelled;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      if (running_.empty() && waiting_.empty()) {
        mu_.Await(absl::Condition(this, &ContinuousBatchingExecutor::HasWork));
      }
      stopping = stopping_;
      while (!incoming_.empty()) {
        waiting_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      cancelled.swap(cancelled_);
    }
    if (stopping) break;
    EndRequestsFromOutside(std::move(cancelled), absl::CancelledError("request cancelled"));
    ExpireDeadlines();
    Admit();
    EncodeSources();
    Step();
    CheckBackendHealth();
  }
  // Shutdown: whatever is left ends now.
  std::vector<RequestId> all;
  for (const auto& r : waiting_) all.push_back(r->id);
  for (const auto& r : running_) all.push_back(r->id);
  EndRequestsFromOutside(std::move(all), absl::UnavailableError("server shutting down"));
  Publish(0);
}

void ContinuousBatchingExecutor::EndRequestsFromOutside(std::vector<RequestId> ids,
                                                        const absl::Status& status) {
  for (RequestId id : ids) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if ((*it)->id != id) continue;
      {
        absl::MutexLock lock(&mu_);
        --queued_;
      }
      Finish(**it, status, FinishReason::kLength);
      waiting_.erase(it);
      break;
    }
    for (auto& r : running_) {
      if (r->id == id && !r->done) Finish(*r, status, FinishReason::kLength);
    }
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
}

void ContinuousBatchingExecutor::ExpireDeadlines() {
  const absl::Time now = absl::Now();
  std::vector<RequestId> expired;
  for (const auto& r : waiting_) {
    if (r->request.deadline < now) expired.push_back(r->id);
  }
  for (const auto& r : running_) {
    if (r->request.deadline < now) expired.push_back(r->id);
  }
  if (!expired.empty()) {
    EndRequestsFromOutside(std::move(expired), absl::DeadlineExceededError("deadline exceeded"));
  }
}

void ContinuousBatchingExecutor::Admit() {
  std::vector<int64_t> needs;
  for (const auto& r : waiting_) needs.push_back(r->reserved_bytes);
  const int admit =
      PlanAdmission(needs, {capacity_bytes_, reserved_bytes_, static_cast<int>(running_.size()),
                            options_.max_running_sequences});
  for (int i = 0; i < admit; ++i) {
    std::unique_ptr<ActiveRequest> r = std::move(waiting_.front());
    waiting_.pop_front();
    {
      absl::MutexLock lock(&mu_);
      --queued_;
    }
    reserved_bytes_ += r->reserved_bytes;
    r->admitted = true;
    absl::StatusOr<SequenceId> sequence = backend_->Acquire();
    if (!sequence.ok()) {
      Finish(*r, sequence.status(), FinishReason::kLength);
      continue;
    }
    r->sequence = *sequence;
    r->has_sequence = true;
    if (r->beam_search()) {
      r->beams.push_back({r->sequence, {}, 0.0});
    } else {
      r->sampler = std::make_unique<Sampler>(r->request.sampling);
      r->text = std::make_unique<TextStream>(tokenizer_, r->request.stop);
    }
    running_.push_back(std::move(r));
  }
}

void ContinuousBatchingExecutor::EncodeSources() {
  // Each iteration accrues encode_token_budget tokens of encoder credit (up to one longest
  // source). Turns alternate: on a "shortest" turn the shortest waiting source is encoded if it
  // is within one iteration's budget; on an "oldest" turn the oldest is encoded once the credit
  // covers it. So a one-word source never waits behind a batch of long ones, the oldest always
  // progresses, and at most one source is encoded per iteration: decode steps run between them.
  // With nothing decoding there is nothing to stall: the oldest is encoded without credit.
  encode_credit_ =
      std::min<int64_t>(encode_credit_ + options_.encode_token_budget,
                        std::max(options_.max_source_tokens, options_.encode_token_budget));
  ActiveRequest* oldest = nullptr;
  ActiveRequest* shortest = nullptr;
  bool decoding = false;
  for (const auto& r : running_) {
    if (r->done) continue;
    if (r->encoded) {
      decoding = true;
      continue;
    }
    if (oldest == nullptr) oldest = r.get();
    if (shortest == nullptr || r->source_ids.size() < shortest->source_ids.size()) {
      shortest = r.get();
    }
  }
  if (oldest == nullptr) return;
  const bool oldest_turn = encode_oldest_next_;
  encode_oldest_next_ = !encode_oldest_next_;
  ActiveRequest* pick = nullptr;
  const auto tokens = [](const ActiveRequest* r) {
    return static_cast<int64_t>(r->source_ids.size());
  };
  if (!oldest_turn && tokens(shortest) <= options_.encode_token_budget) {
    pick = shortest;
  } else if (!decoding || (oldest_turn && tokens(oldest) <= encode_credit_)) {
    pick = oldest;
  }
  if (pick == nullptr) return;
  if (pick == oldest) encode_credit_ = std::max<int64_t>(0, encode_credit_ - tokens(pick));
  if (pick->request.deadline < absl::Now()) {
    Finish(*pick, absl::DeadlineExceededError("deadline exceeded"), FinishReason::kLength);
  } else if (absl::Status status = backend_->Encode(pick->source_ids, pick->sequence);
             !status.ok()) {
    Finish(*pick, status, FinishReason::kLength);
  } else {
    pick->encoded = true;
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
}

void ContinuousBatchingExecutor::Step() {
  // Rows: one decode token per running sequence, then prefill chunks under the token budget.
  // Decode tokens the backend samples itself go apart: only their ids come back.
  std::vector<DecodeRow> rows;
  std::vector<ActiveRequest*> owners;  // one per row with want_logits, in row order
  std::vector<SampledRow> sampled_rows;
  std::vector<ActiveRequest*> sampled_owners;
  for (const auto& r : running_) {
    if (!r->prefill_done()) continue;
    if (SampledByBackend(*r)) {
      const auto generated = static_cast<uint64_t>(r->context.size() - r->prompt_ids.size());
      sampled_rows.push_back({r->sequence, r->pending_token, r->request.sampling, generated});
      sampled_owners.push_back(r.get());
    } else if (r->beam_search()) {
      for (const Beam& beam : r->beams) {
        rows.push_back({beam.sequence, beam.tokens.back(), true});
        owners.push_back(r.get());
      }
    } else {
      rows.push_back({r->sequence, r->pending_token, true});
      owners.push_back(r.get());
    }
  }
  std::vector<int64_t> remaining;
  int64_t prefilling = 0;
  for (const auto& r : running_) {
    remaining.push_back(r->encoded ? static_cast<int64_t>(r->prompt_ids.size()) - r->prefilled : 0);
    prefilling += remaining.back() > 0;
  }
  const int64_t decode_rows = static_cast<int64_t>(rows.size() + sampled_rows.size());
  int64_t prefill_tokens = options_.prefill_token_budget;
  if (options_.prefill_policy == PrefillPolicy::kTime) {
    prefill_tokens = PrefillTokensForIteration({
        .decode_rows = decode_rows,
        .decode_step_seconds = costs_.DecodeStepSeconds(decode_rows + prefilling),
        .prompt_row_seconds = costs_.PromptRowSeconds(),
        .iteration_budget_seconds = options_.iteration_budget_ms / 1000.0,
        .decode_step_share = options_.prefill_step_share,
        .token_budget = options_.prefill_token_budget,
    });
  }
  for (const PrefillChunk& chunk : PlanPrefill(remaining, prefill_tokens)) {
    ActiveRequest& r = *running_[chunk.index];
    for (int64_t t = r.prefilled; t < r.prefilled + chunk.tokens; ++t) {
      const bool last = t + 1 == static_cast<int64_t>(r.prompt_ids.size());
      rows.push_back({r.sequence, r.prompt_ids[t], last});
      if (last) owners.push_back(&r);
    }
    r.prefilled += chunk.tokens;
  }
  if (rows.empty() && sampled_rows.empty()) {
    Publish(0);
    return;
  }
  // The backend calls' wall time feeds the cost model (failed calls do not).
  const int64_t prompt_rows = static_cast<int64_t>(rows.size() + sampled_rows.size()) - decode_rows;
  std::chrono::duration<double> backend_time{0};
  const auto observe_costs = [&] {
    costs_.Observe(decode_rows, prompt_rows, backend_time.count());
  };
  int64_t batch_sequences = static_cast<int64_t>(sampled_rows.size());
  bool sampled_ok = true;
  if (!sampled_rows.empty()) {
    std::vector<int32_t> tokens;
    const auto started = std::chrono::steady_clock::now();
    const absl::Status status = backend_->DecodeAndSample(sampled_rows, &tokens);
    backend_time += std::chrono::steady_clock::now() - started;
    sampled_ok = status.ok();
    for (size_t i = 0; i < sampled_owners.size(); ++i) {
      if (status.ok()) {
        Accept(*sampled_owners[i], tokens[i]);
      } else {
        Finish(*sampled_owners[i], status, FinishReason::kLength);
      }
    }
  }
  // Reused from step to step: a batch's logits (batch x vocabulary floats, megabytes at
  // batch 64) are neither allocated nor faulted in again every iteration.
  std::vector<float>& logits = logits_;
  logits.clear();
  if (rows.empty()) {
    if (sampled_ok) observe_costs();
    std::erase_if(running_, [](const auto& r) { return r->done; });
    Publish(batch_sequences);
    return;
  }
  const auto decode_started = std::chrono::steady_clock::now();
  const absl::Status decode_status = backend_->Decode(rows, &logits);
  backend_time += std::chrono::steady_clock::now() - decode_started;
  if (!decode_status.ok()) {
    for (ActiveRequest* r : owners) {
      if (!r->done) Finish(*r, decode_status, FinishReason::kLength);
    }
    std::erase_if(running_, [](const auto& r) { return r->done; });
    Publish(0);
    return;
  }
  if (sampled_ok) observe_costs();
  for (size_t i = 0; i < rows.size(); ++i) {
    batch_sequences += i == 0 || rows[i].sequence != rows[i - 1].sequence;
  }
  const int vocab = config_.vocab_size;
  for (size_t i = 0; i < owners.size();) {
    ActiveRequest& r = *owners[i];
    size_t end = i + 1;
    while (end < owners.size() && owners[end] == owners[i]) ++end;
    const std::span<const float> slice(logits.data() + i * vocab, (end - i) * vocab);
    if (r.beam_search()) {
      BeamStepFor(r, slice);
    } else {
      Sample(r, slice);
    }
    i = end;
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
  Publish(batch_sequences);
}

void ContinuousBatchingExecutor::RecordToken(ActiveRequest& r) {
  const absl::Time now = absl::Now();
  if (options_.observer != nullptr) {
    if (r.any_token) {
      options_.observer->OnToken(absl::ToDoubleSeconds(now - r.last_token));
    } else {
      options_.observer->OnFirstToken(absl::ToDoubleSeconds(now - r.enqueued));
    }
  }
  r.any_token = true;
  r.last_token = now;
}

void ContinuousBatchingExecutor::Sample(ActiveRequest& r, std::span<const float> logits) {
  Accept(r, r.sampler->Sample(logits, r.context));
}

void ContinuousBatchingExecutor::Accept(ActiveRequest& r, int32_t token) {
  if (token == config_.eos_id && !r.request.ignore_eos) {
    Finish(r, absl::OkStatus(), FinishReason::kEos, {}, r.text->Flush());
    return;
  }
  RecordToken(r);
  r.context.push_back(token);
  absl::StatusOr<std::string> text = r.text->Append(token);
  if (!text.ok()) {
    Finish(r, text.status(), FinishReason::kLength);
    return;
  }
  if (r.text->stopped()) {
    Finish(r, absl::OkStatus(), FinishReason::kStop, {token}, *std::move(text));
  } else if (static_cast<int>(r.text->tokens().size()) >= r.request.max_tokens) {
    Finish(r, absl::OkStatus(), FinishReason::kLength, {token}, *text + r.text->Flush());
  } else {
    r.pending_token = token;
    Emit(r, {token}, *std::move(text));
  }
}

void ContinuousBatchingExecutor::BeamStepFor(ActiveRequest& r, std::span<const float> logits) {
  std::vector<double> scores;
  for (const Beam& beam : r.beams) scores.push_back(beam.score);
  const BeamStep step =
      SelectBeams(scores, logits, config_.vocab_size, r.request.beam_size, config_.eos_id);
  ++r.beam_steps;
  for (const BeamChoice& f : step.finished) {
    r.finished_beams.push_back({0, r.beams[f.parent].tokens, f.score});
  }
  // The first child of a beam keeps its sequence; further children fork it.
  std::vector<bool> kept(r.beams.size(), false);
  std::vector<Beam> next;
  for (const BeamChoice& c : step.continuing) {
    const Beam& parent = r.beams[c.parent];
    SequenceId sequence = parent.sequence;
    if (kept[c.parent]) {
      absl::StatusOr<SequenceId> fork = backend_->Fork(parent.sequence);
      if (!fork.ok()) {
        for (const Beam& b : next) {
          if (b.sequence != parent.sequence) backend_->Release(b.sequence);
        }
        Finish(r, fork.status(), FinishReason::kLength);
        return;
      }
      sequence = *fork;
    }
    kept[c.parent] = true;
    Beam child{sequence, parent.tokens, c.score};
    child.tokens.push_back(c.token);
    next.push_back(std::move(child));
  }
  for (size_t b = 0; b < r.beams.size(); ++b) {
    if (!kept[b]) backend_->Release(r.beams[b].sequence);
  }
  r.beams = std::move(next);
  const bool enough = static_cast<int>(r.finished_beams.size()) >= r.request.beam_size;
  if (enough || r.beams.empty() || r.beam_steps >= r.request.max_tokens) FinishBeams(r);
}

void ContinuousBatchingExecutor::FinishBeams(ActiveRequest& r) {
  // Best by length-normalised log-probability (EOS counts as a token); finished hypotheses win
  // over unfinished ones.
  const bool any_finished = !r.finished_beams.empty();
  const std::vector<Beam>& candidates = any_finished ? r.finished_beams : r.beams;
  auto normalized = [any_finished](const Beam& b) {
    return NormalizedScore(b.score, static_cast<int64_t>(b.tokens.size()) + (any_finished ? 1 : 0));
  };
  const Beam* best = nullptr;
  for (const Beam& b : candidates) {
    if (best == nullptr || normalized(b) > normalized(*best)) best = &b;
  }
  std::vector<int32_t> tokens = best != nullptr ? best->tokens : std::vector<int32_t>{};
  const FinishReason reason = any_finished ? FinishReason::kEos : FinishReason::kLength;
  TextStream text(tokenizer_, r.request.stop);
  std::string out;
  for (int32_t t : tokens) {
    absl::StatusOr<std::string> piece = text.Append(t);
    if (!piece.ok()) {
      Finish(r, piece.status(), FinishReason::kLength);
      return;
    }
    out += *piece;
    if (text.stopped()) break;
  }
  out += text.Flush();
  RecordToken(r);
  Finish(r, absl::OkStatus(), text.stopped() ? FinishReason::kStop : reason, text.tokens(),
         std::move(out));
}

void ContinuousBatchingExecutor::Emit(ActiveRequest& r, std::vector<int32_t> tokens,
                                      std::string text) {
  GenerationEvent event;
  event.token_ids = std::move(tokens);
  event.text = std::move(text);
  event.prompt_tokens = r.prompt_tokens();
  event.completion_tokens = static_cast<int>(r.context.size() - r.prompt_ids.size());
  r.callback(std::move(event));
}

void ContinuousBatchingExecutor::ReleaseStates(ActiveRequest& r) {
  for (const Beam& beam : r.beams) backend_->Release(beam.sequence);
  if (r.has_sequence && r.beams.empty()) backend_->Release(r.sequence);
  r.beams.clear();
  r.has_sequence = false;
}

void ContinuousBatchingExecutor::Finish(ActiveRequest& r, absl::Status status, FinishReason reason,
                                        std::vector<int32_t> tokens, std::string text) {
  if (r.done) return;
  r.done = true;
  ReleaseStates(r);
  if (r.admitted) reserved_bytes_ -= r.reserved_bytes;
  GenerationEvent event;
  event.token_ids = std::move(tokens);
  event.text = std::move(text);
  event.finished = true;
  event.finish_reason = reason;
  event.status = std::move(status);
  event.prompt_tokens = r.prompt_tokens();
  event.completion_tokens = r.beam_search()
                                ? static_cast<int>(event.token_ids.size())
                                : static_cast<int>(r.context.size() - r.prompt_ids.size());
  if (options_.observer != nullptr) {
    options_.observer->OnRequestFinished(event.status, event.prompt_tokens, event.completion_tokens,
                                         absl::ToDoubleSeconds(absl::Now() - r.enqueued));
  }
  r.callback(std::move(event));
}

void ContinuousBatchingExecutor::CheckBackendHealth() {
  const absl::Status health = backend_->Health();
  if (health.ok()) return;
  const absl::Status failure = absl::UnavailableError(
      absl::StrCat("the model's backend failed and cannot serve: ", health.message()));
  {
    absl::MutexLock lock(&mu_);
    backend_failure_ = failure;
    stats_.backend_failure = std::string(health.message());
  }
  std::vector<RequestId> all;
  for (const auto& r : waiting_) all.push_back(r->id);
  for (const auto& r : running_) all.push_back(r->id);
  EndRequestsFromOutside(std::move(all), failure);
  Publish(0);
}

void ContinuousBatchingExecutor::Publish(int64_t batch_size) {
  ++iterations_;
  const BackendMemory memory = backend_->memory();
  ExecutorStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats_.running_sequences = memory.sequences;
    stats_.waiting_requests = queued_;
    stats_.state_bytes_in_use = memory.bytes_in_use;
    stats_.state_bytes_capacity = capacity_bytes_;
    stats_.kv_cache_bytes = memory.kv_bytes_in_use;
    stats_.iterations = iterations_;
    stats_.draining = draining_;
    stats = stats_;
  }
  if (options_.observer != nullptr) options_.observer->OnIteration(batch_size, stats);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(std::unique_ptr<DecodeBackend> backend,
                                                           const Tokenizer& tokenizer,
                                                           const ExecutorOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("backend must not be null");
  if (options.max_waiting_requests < 0 || options.max_running_sequences < 1 ||
      options.prefill_token_budget < 1 || options.max_prompt_tokens < 1 ||
      options.max_new_tokens < 1 || options.max_source_tokens < 1 ||
      options.encode_token_budget < 1 || options.max_batch_source_tokens < 1) {
    return absl::InvalidArgumentError("executor limits must be positive");
  }
  if (!(options.iteration_budget_ms >= 0 && options.iteration_budget_ms <= 1e6)) {
    return absl::InvalidArgumentError("iteration_budget_ms must be in [0, 1000000]");
  }
  if (!(options.prefill_step_share > 0 && options.prefill_step_share <= 16)) {
    return absl::InvalidArgumentError("prefill_step_share must be in (0, 16]");
  }
  return std::unique_ptr<Executor>(
      new ContinuousBatchingExecutor(std::move(backend), tokenizer, options));
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Model& model,
                                                           const Tokenizer& tokenizer,
                                                           const ExecutorOptions& options) {
  if (options.state_budget_bytes <= 0) {
    return absl::InvalidArgumentError("state budget must be positive");
  }
  return Create(
      std::make_unique<CpuBackend>(model, options.state_budget_bytes, options.cpu_threads),
      tokenizer, options);
}

}  // namespace abcd
