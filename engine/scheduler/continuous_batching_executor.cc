// The ContinuousBatchingExecutor: queueing, and the engine loop: cancellation and deadlines,
// admission (with prefix reuse), encoding, the iteration (plan -> run -> apply; the plan is
// iteration_plan.cc, the apply step apply_output.cc), prefix snapshots and published stats.
#include "engine/scheduler/continuous_batching_executor.h"

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/beam_search.h"
#include "engine/scheduler/capacity_scheduler.h"

namespace abcd {
namespace executor_internal {
ContinuousBatchingExecutor::ContinuousBatchingExecutor(std::unique_ptr<DecodeBackend> backend,
                                                       const Tokenizer& tokenizer,
                                                       const ExecutorOptions& options)
    : backend_(std::move(backend)),
      config_(backend_->config()),
      tokenizer_(tokenizer),
      options_(options),
      intake_(*backend_, tokenizer, options),
      capacity_bytes_(backend_->capacity_bytes()),
      backend_samples_(backend_->samples_tokens()),
      prefix_cache_(backend_->snapshots_supported() && !backend_->config().is_encoder_decoder()
                        ? options.prefix_cache_bytes
                        : 0) {
  stats_.state_bytes_capacity = capacity_bytes_;
  plan_params_ = {
      .backend_samples = backend_samples_,
      .prefill_policy = options_.prefill_policy,
      .prefill_token_budget = options_.prefill_token_budget,
      .iteration_budget_ms = options_.iteration_budget_ms,
      .prefill_step_share = options_.prefill_step_share,
      .prefill_deadline_ms = options_.prefill_deadline_ms,
      .now = absl::Now(),
      .costs = &costs_,
  };
  thread_ = std::thread([this] { Loop(); });
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
                        intake_.Prepare(std::move(request), std::move(callback)));
  std::vector<std::unique_ptr<ActiveRequest>> rs;
  rs.push_back(std::move(r));
  ABCD_ASSIGN_OR_RETURN(std::vector<RequestId> ids, Queue(std::move(rs)));
  return ids.front();
}

absl::StatusOr<std::vector<RequestId>> ContinuousBatchingExecutor::EnqueueBatch(
    std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) {
  ABCD_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ActiveRequest>> rs,
                        intake_.PrepareBatch(std::move(requests), std::move(callbacks)));
  return Queue(std::move(rs));
}

void ContinuousBatchingExecutor::Warmup() {
  const int64_t fed = WarmupRows();
  absl::MutexLock lock(&mu_);
  stats_.warmup_tokens = fed;
}

int64_t ContinuousBatchingExecutor::WarmupRows() {
  int64_t rows = std::min(options_.warmup_tokens, options_.prefill_token_budget);
  if (config_.max_positions() > 0) rows = std::min(rows, int64_t{config_.max_positions()});
  if (rows <= 0 || config_.is_encoder_decoder()) return 0;
  absl::StatusOr<int64_t> bytes = backend_->RequestBytes(rows, 0, 0, 1);
  if (!bytes.ok() || *bytes > capacity_bytes_) return 0;
  absl::StatusOr<SequenceId> sequence = backend_->Acquire();
  if (!sequence.ok()) return 0;
  std::vector<DecodeRow> prompt;
  prompt.reserve(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    // Any ids of the vocabulary: only the buffers' sizes matter.
    const auto token = static_cast<int32_t>((i * 7919 + 1) % config_.vocab_size);
    prompt.push_back({*sequence, token, i + 1 == rows});
  }
  std::vector<float> logits;
  const bool fed = backend_->Decode(prompt, &logits).ok();
  backend_->Release(*sequence);
  return fed ? rows : 0;
}

void ContinuousBatchingExecutor::Loop() {
  Warmup();
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

bool ContinuousBatchingExecutor::PlanPrefixReuse(ActiveRequest& r) {
  if (r.cache_checked || prefix_cache_.budget_bytes() == 0 || r.restore_state != nullptr ||
      !r.source_ids.empty() || r.request.prompt_logprobs) {
    return true;
  }
  const std::span<const int32_t> prompt(r.prompt_ids);
  const int64_t n = static_cast<int64_t>(prompt.size());
  const PrefixCache::Match match = prefix_cache_.Lookup(prompt);
  // A running request is about to store a longer prefix of this prompt: wait for it rather
  // than prefill the same tokens twice.
  if (match.pending > match.cached) return false;
  r.cache_checked = true;
  prefix_counters_.Count(match, n);
  if (match.cached > 0) {
    r.restore_state = match.snapshot;
    r.prefilled = match.cached;
    r.cached_tokens = match.cached;
  }
  // Snapshots are taken exactly where prompts diverge (so the next prompt sharing this prefix
  // hits), and before the prompt's last token (an exact repeat, or a later turn that resends
  // the history, restores all but that token: the state after it cannot give its logits). A
  // state too large for a fair share of the cache is not worth copying on the engine thread.
  absl::StatusOr<int64_t> bytes = backend_->RequestBytes(n, 0, 1, 1);
  if (!bytes.ok() || *bytes > prefix_cache_.budget_bytes() / 8) return true;
  const int64_t end = n - 1;
  const int64_t divergence = std::min(match.shared, end);
  r.snapshots_cut = backend_->earlier_snapshots_supported();
  if (divergence >= kMinCachedPrefix && divergence > r.prefilled) {
    r.snapshot_at = divergence;
    prefix_cache_.MarkPending(prompt.first(divergence));
  }
  if (end >= kMinCachedPrefix && end > std::max(r.prefilled, r.snapshot_at)) {
    r.snapshot_end_at = end;
    prefix_cache_.MarkPending(prompt.first(end));
  }
  return true;
}

void ContinuousBatchingExecutor::Admit() {
  // First come, first served (a request that does not fit stops admission, so a large one is
  // never overtaken), except that a request waiting for a prefix snapshot lets others pass.
  int64_t running = 0;
  for (const auto& r : running_) running += r->done ? 0 : (r->forked ? 1 : r->request.n);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    ActiveRequest& r = **it;
    const int64_t sequences = r.request.n;
    if (!CanAdmit({capacity_bytes_, reserved_bytes_, static_cast<int>(running),
                   options_.max_running_sequences},
                  r.reserved_bytes, static_cast<int>(sequences))) {
      break;
    }
    if (!PlanPrefixReuse(r)) {
      ++it;
      continue;
    }
    std::unique_ptr<ActiveRequest> admitted = std::move(*it);
    it = waiting_.erase(it);
    {
      absl::MutexLock lock(&mu_);
      --queued_;
    }
    running += sequences;
    reserved_bytes_ += admitted->reserved_bytes;
    admitted->admitted = true;
    absl::StatusOr<SequenceId> sequence = admitted->restore_state != nullptr
                                              ? backend_->Restore(*admitted->restore_state)
                                              : backend_->Acquire();
    admitted->restore_state.reset();
    if (!sequence.ok()) {
      Finish(*admitted, sequence.status(), FinishReason::kLength);
      continue;
    }
    admitted->sequence = *sequence;
    admitted->has_sequence = true;
    if (admitted->beam_search()) {
      admitted->beams.push_back({admitted->sequence, {}, 0.0});
    } else {
      admitted->sampler = std::make_unique<Sampler>(admitted->request.sampling);
      if (admitted->request.response_format != nullptr) {
        admitted->constraint = std::make_unique<TokenConstraint>(admitted->request.response_format,
                                                                 ConstraintVocabulary(),
                                                                 !admitted->request.ignore_eos);
      }
      admitted->text =
          std::make_unique<TextStream>(tokenizer_, admitted->request.stop, admitted->prompt_ids);
    }
    running_.push_back(std::move(admitted));
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
  plan_params_.now = absl::Now();
  const IterationPlan plan = PlanIteration(running_, plan_params_);
  if (plan.overdue_widened && options_.observer != nullptr) options_.observer->OnOverduePrefill();
  if (plan.empty()) {
    Publish(0);
    return;
  }
  const IterationOutput output = RunIteration(plan);
  ApplyOutput(plan, output);
}

IterationOutput ContinuousBatchingExecutor::RunIteration(const IterationPlan& plan) {
  IterationOutput output;
  // The backend calls' wall time feeds the cost model (failed calls do not).
  std::chrono::duration<double> backend_time{0};
  if (!plan.sampled_rows.empty()) {
    const auto started = std::chrono::steady_clock::now();
    output.sampled_status = backend_->DecodeAndSample(plan.sampled_rows, &output.sampled_tokens);
    backend_time += std::chrono::steady_clock::now() - started;
  }
  // Reused from step to step: a batch's logits (batch x vocabulary floats, megabytes at
  // batch 64) are neither allocated nor faulted in again every iteration.
  logits_.clear();
  if (!plan.rows.empty()) {
    const auto started = std::chrono::steady_clock::now();
    output.decode_status = backend_->Decode(plan.rows, &logits_);
    backend_time += std::chrono::steady_clock::now() - started;
    output.logits = logits_;
  }
  if (output.sampled_status.ok() && output.decode_status.ok()) {
    costs_.Observe(plan.decode_rows, plan.prompt_rows(), backend_time.count());
  }
  return output;
}

void ContinuousBatchingExecutor::CacheFinalState(const ActiveRequest& r) {
  if (!r.cache_checked || !r.has_sequence || r.beam_search() || r.request.save_state) return;
  absl::StatusOr<int64_t> bytes =
      backend_->RequestBytes(static_cast<int64_t>(r.context.size()), 0, 1, 1);
  if (!bytes.ok() || *bytes > prefix_cache_.budget_bytes() / 8) return;
  absl::StatusOr<std::string> snapshot =
      backend_->Snapshot(r.sequence, prefix_cache_.TakeRecycled());
  if (!snapshot.ok()) return;
  absl::StatusOr<StatePool::SnapshotHeader> header = StatePool::ReadSnapshotHeader(*snapshot);
  if (!header.ok() || header->position < kMinCachedPrefix ||
      header->position > static_cast<int64_t>(r.context.size())) {
    return;
  }
  // Speculative: only a client that resends this sampled continuation hits it.
  prefix_cache_.Insert(std::span(r.context).first(header->position), *std::move(snapshot),
                       SnapshotKind::kSpeculative);
}

void ContinuousBatchingExecutor::StoreDueSnapshots() {
  const auto store = [this](ActiveRequest& r, int64_t length) {
    const std::span<const int32_t> prefix = std::span(r.prompt_ids).first(length);
    absl::StatusOr<std::string> snapshot =
        r.prefilled == length
            ? backend_->Snapshot(r.sequence, prefix_cache_.TakeRecycled())
            : backend_->SnapshotAt(r.sequence, length, prefix_cache_.TakeRecycled());
    if (snapshot.ok()) prefix_cache_.Insert(prefix, *std::move(snapshot));
    prefix_cache_.ClearPending(prefix);
  };
  // Prefill stops exactly at a snapshot point, or passes it when the snapshot is cut.
  const auto due = [](const ActiveRequest& r, int64_t at) {
    return at > 0 && (r.prefilled == at || (r.snapshots_cut && r.prefilled > at));
  };
  for (const auto& r : running_) {
    if (r->done) continue;
    if (due(*r, r->snapshot_at)) {
      store(*r, r->snapshot_at);
      r->snapshot_at = 0;
    }
    if (due(*r, r->snapshot_end_at)) {
      store(*r, r->snapshot_end_at);
      r->snapshot_end_at = 0;
    }
  }
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
    stats_.kv_cache_spare_bytes = memory.kv_spare_bytes;
    stats_.prefix_cache_bytes = prefix_cache_.bytes();
    stats_.prefix_cache_entries = prefix_cache_.entries();
    stats_.prefix_cache_queried_tokens = prefix_counters_.queried_tokens;
    stats_.prefix_cache_hit_tokens = prefix_counters_.hit_tokens;
    stats_.prefix_cache_counters = prefix_counters_;
    stats_.prefix_cache_evictions = prefix_cache_.evictions();
    stats_.iterations = iterations_;
    stats_.draining = draining_;
    stats = stats_;
  }
  if (options_.observer != nullptr) options_.observer->OnIteration(batch_size, stats);
}

}  // namespace executor_internal

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(std::unique_ptr<DecodeBackend> backend,
                                                           const Tokenizer& tokenizer,
                                                           const ExecutorOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("backend must not be null");
  if (options.max_waiting_requests < 0 || options.max_running_sequences < 1 ||
      options.prefill_token_budget < 1 || options.max_prompt_tokens < 1 ||
      options.max_new_tokens < 1 || options.max_source_tokens < 1 ||
      options.encode_token_budget < 1 || options.max_batch_source_tokens < 1 ||
      options.max_choices < 1 || options.prefix_cache_bytes < 0) {
    return absl::InvalidArgumentError("executor limits must be positive");
  }
  if (!(options.iteration_budget_ms >= 0 && options.iteration_budget_ms <= 1e6)) {
    return absl::InvalidArgumentError("iteration_budget_ms must be in [0, 1000000]");
  }
  if (!(options.prefill_step_share > 0 && options.prefill_step_share <= 16)) {
    return absl::InvalidArgumentError("prefill_step_share must be in (0, 16]");
  }
  if (!(options.prefill_deadline_ms >= 0 && options.prefill_deadline_ms <= 1e6)) {
    return absl::InvalidArgumentError("prefill_deadline_ms must be in [0, 1000000]");
  }
  ABCD_RETURN_IF_ERROR(ValidateSpeculativeParams(options.speculative, "speculative"));
  return std::unique_ptr<Executor>(
      new executor_internal::ContinuousBatchingExecutor(std::move(backend), tokenizer, options));
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Model& model,
                                                           const Tokenizer& tokenizer,
                                                           const ExecutorOptions& options) {
  if (options.state_budget_bytes <= 0) {
    return absl::InvalidArgumentError("state budget must be positive");
  }
  return Create(std::make_unique<CpuBackend>(model, options.state_budget_bytes, options.cpu_threads,
                                             options.cpu_products),
                tokenizer, options);
}

}  // namespace abcd
