// The apply step of the ContinuousBatchingExecutor's iteration (engine thread): ApplyOutput
// routes what the backend returned for an IterationPlan (iteration_plan.h) to its requests:
// backend-sampled tokens, beam steps, n-forks, prompt log-probabilities and host-side sampling;
// then what follows from a token: text, events, finishing (state release, session save, final
// state into the prefix cache).
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/beam_search.h"
#include "engine/scheduler/continuous_batching_executor.h"
#include "engine/state/sequence_blob.h"

namespace abcd {
namespace executor_internal {

void ContinuousBatchingExecutor::ApplyOutput(const IterationPlan& plan,
                                             const IterationOutput& output) {
  for (const auto& r : running_) r->chunk_rows = 0;
  for (const PlannedChunk& chunk : plan.chunks) {
    ActiveRequest& r = *running_[chunk.request];
    r.chunk_start = chunk.start;
    r.chunk_rows = chunk.tokens;
    r.prefilled += chunk.tokens;
  }
  for (size_t i = 0; i < plan.sampled_owners.size(); ++i) {
    ActiveRequest& r = *running_[plan.sampled_owners[i]];
    r.pacer.Observe(0, 0);  // a step without a draft (speculation's back-off counts it)
    if (output.sampled_status.ok()) {
      Accept(r, output.sampled_tokens[i]);
    } else {
      Finish(r, output.sampled_status, FinishReason::kLength);
    }
  }
  int64_t batch_sequences = static_cast<int64_t>(plan.sampled_rows.size());
  if (plan.rows.empty()) {
    std::erase_if(running_, [](const auto& r) { return r->done; });
    Publish(batch_sequences);
    return;
  }
  if (!output.decode_status.ok()) {
    for (size_t owner : plan.row_owners) {
      if (!running_[owner]->done)
        Finish(*running_[owner], output.decode_status, FinishReason::kLength);
    }
    std::erase_if(running_, [](const auto& r) { return r->done; });
    Publish(0);
    return;
  }
  StoreDueSnapshots();
  for (const PlannedDraft& draft : plan.drafts) running_[draft.request]->draft = draft.tokens;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    batch_sequences += i == 0 || plan.rows[i].sequence != plan.rows[i - 1].sequence;
  }
  const int vocab = config_.vocab_size;
  std::vector<std::unique_ptr<ActiveRequest>> choices;  // forked this step (n > 1)
  const std::vector<size_t>& owners = plan.row_owners;
  for (size_t i = 0; i < owners.size();) {
    size_t end = i + 1;
    while (end < owners.size() && owners[end] == owners[i]) ++end;
    RouteLogits(*running_[owners[i]], output.logits.subspan(i * vocab, (end - i) * vocab),
                &choices);
    i = end;
  }
  for (auto& choice : choices) running_.push_back(std::move(choice));
  std::erase_if(running_, [](const auto& r) { return r->done; });
  Publish(batch_sequences);
}

void ContinuousBatchingExecutor::RouteLogits(ActiveRequest& r, std::span<const float> logits,
                                             std::vector<std::unique_ptr<ActiveRequest>>* choices) {
  if (r.beam_search()) {
    BeamStepFor(r, logits);
  } else if (r.request.prompt_logprobs && r.chunk_rows > 0) {
    ScorePrompt(r, logits);
    if (r.prefill_done() && r.request.max_tokens == 0) {
      Finish(r, absl::OkStatus(), FinishReason::kLength);
    } else if (r.prefill_done()) {
      Sample(r, logits.last(config_.vocab_size));
    }
  } else if (r.group->n > 1 && !r.forked) {
    // The prompt is in: every choice starts from this state and these logits.
    const size_t first = choices->size();
    if (ForkChoices(r, choices)) {
      Sample(r, logits);
      for (size_t c = first; c < choices->size(); ++c) Sample(*(*choices)[c], logits);
    }
  } else {
    SampleDecode(r, logits);
  }
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

std::shared_ptr<const TokenVocabulary> ContinuousBatchingExecutor::ConstraintVocabulary() {
  if (constraint_vocabulary_ == nullptr) {
    std::vector<std::string> bytes = tokenizer_.TokenBytes();
    // A padded embedding's extra rows have no text.
    bytes.resize(static_cast<size_t>(config_.vocab_size));
    std::vector<int32_t> stops = {config_.eos_id};
    stops.insert(stops.end(), config_.extra_stop_ids.begin(), config_.extra_stop_ids.end());
    constraint_vocabulary_ = std::make_shared<const TokenVocabulary>(std::move(bytes), stops);
  }
  return constraint_vocabulary_;
}

int32_t ContinuousBatchingExecutor::Sample(ActiveRequest& r, std::span<const float> logits) {
  const TokenMask* mask = nullptr;
  if (r.constraint != nullptr) {
    mask = &r.constraint->Allowed();
    if (mask->allowed == 0) {
      Finish(r,
             absl::InternalError(absl::StrCat(
                 "response_format: no token of the model's vocabulary continues the JSON after ",
                 r.generated_tokens(), " generated tokens")),
             FinishReason::kLength);
      return -1;
    }
  }
  const int32_t token = r.sampler->Sample(logits, r.context, mask);
  if (r.request.logprobs >= 0) {
    r.token_logprobs = ComputeLogprobs(logits, token, r.request.logprobs, &logprob_scratch_);
  }
  Accept(r, token);
  return token;
}

void ContinuousBatchingExecutor::SampleDecode(ActiveRequest& r, std::span<const float> logits) {
  if (r.draft.empty()) {
    Sample(r, logits);
    r.pacer.Observe(0, 0);
    return;
  }
  // Row i's logits follow the pending token and drafts [0, i): the sampler runs on each in
  // order, exactly as plain decoding would on those tokens, and a drafted token counts only if
  // the sampler returns it (with a deterministic draft this is the rejection-sampling rule).
  const std::vector<int32_t> draft = std::move(r.draft);
  r.draft.clear();
  const int drafted = static_cast<int>(draft.size());
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  int accepted = 0;
  for (int row = 0; row <= drafted; ++row) {
    r.rollback_row = row < drafted ? row : -1;  // the state to keep ends after this row
    const int32_t token = Sample(r, logits.subspan(static_cast<size_t>(row) * vocab, vocab));
    const bool match = row < drafted && token == draft[static_cast<size_t>(row)];
    accepted += match ? 1 : 0;
    if (r.done || !match) break;
  }
  if (!r.done) {
    if (absl::Status status = RollBack(r); !status.ok()) {
      Finish(r, status, FinishReason::kLength);
    }
  }
  r.pacer.Observe(drafted, accepted);
  if (options_.observer != nullptr) options_.observer->OnSpeculation(drafted, accepted);
}

absl::Status ContinuousBatchingExecutor::RollBack(ActiveRequest& r) {
  const int row = std::exchange(r.rollback_row, -1);
  if (row < 0 || !r.has_sequence) return absl::OkStatus();
  return backend_->Rollback(r.sequence, row);
}

void ContinuousBatchingExecutor::ScorePrompt(ActiveRequest& r, std::span<const float> logits) {
  const int vocab = config_.vocab_size;
  const int64_t prompt = static_cast<int64_t>(r.prompt_ids.size());
  for (int64_t j = 0; j < r.chunk_rows; ++j) {
    const int64_t next = r.chunk_start + j + 1;  // the prompt token row j predicts
    if (next >= prompt) break;
    r.prompt_scores.push_back(ComputeLogprobs(logits.subspan(j * vocab, vocab), r.prompt_ids[next],
                                              std::max(r.request.logprobs, 0), &logprob_scratch_));
  }
}

void ContinuousBatchingExecutor::AttachLogprobs(ActiveRequest& r, GenerationEvent& event) {
  if (r.request.prompt_logprobs && !r.prompt_scores_sent) {
    r.prompt_scores_sent = true;
    // bos is not part of the prompt the client sent.
    event.prompt_token_ids.assign(r.prompt_ids.begin() + 1, r.prompt_ids.end());
    event.prompt_logprobs = std::move(r.prompt_scores);
  }
  if (r.request.logprobs >= 0 && !r.preceding_sent && !event.token_ids.empty()) {
    r.preceding_sent = true;
    const std::span<const int32_t> tail = TextStream::ContextTail(tokenizer_, r.prompt_ids);
    event.preceding_token_ids.assign(tail.begin(), tail.end());
  }
  if (r.token_logprobs.has_value() && !event.token_ids.empty()) {
    event.logprobs.push_back(*std::move(r.token_logprobs));
  }
  r.token_logprobs.reset();
}

void ContinuousBatchingExecutor::Accept(ActiveRequest& r, int32_t token) {
  if (config_.IsStopToken(token) && !r.request.ignore_eos) {
    Finish(r, absl::OkStatus(), FinishReason::kEos, {}, r.text->Flush());
    return;
  }
  if (r.constraint != nullptr) {
    if (absl::Status s = r.constraint->Accept(token); !s.ok()) {
      Finish(r, absl::InternalError(s.message()), FinishReason::kLength);
      return;
    }
  }
  RecordToken(r);
  if (options_.observer != nullptr) options_.observer->OnTokensGenerated(1);
  r.context.push_back(token);
  absl::StatusOr<std::string> text = r.text->Append(token);
  if (!text.ok()) {
    Finish(r, text.status(), FinishReason::kLength);
    return;
  }
  if (r.text->stopped()) {
    Finish(r, absl::OkStatus(), FinishReason::kStop, {token}, *std::move(text));
  } else if (r.constraint != nullptr && r.constraint->complete()) {
    // The JSON value is complete: nothing but the end may follow.
    Finish(r, absl::OkStatus(), FinishReason::kStop, {token}, *text + r.text->Flush());
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
  TextStream text(tokenizer_, r.request.stop, r.prompt_ids);
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
  if (options_.observer != nullptr) {
    options_.observer->OnTokensGenerated(static_cast<int>(text.tokens().size()));
  }
  Finish(r, absl::OkStatus(), text.stopped() ? FinishReason::kStop : reason,
         std::vector<int32_t>(text.tokens().begin(), text.tokens().end()), std::move(out));
}

void ContinuousBatchingExecutor::Emit(ActiveRequest& r, std::vector<int32_t> tokens,
                                      std::string text) {
  GenerationEvent event;
  event.index = r.index;
  event.token_ids = std::move(tokens);
  event.text = std::move(text);
  event.prompt_tokens = r.prompt_tokens();
  event.cached_prompt_tokens = static_cast<int>(r.cached_tokens);
  event.completion_tokens = r.generated_tokens();
  AttachLogprobs(r, event);
  r.group->callback(std::move(event));
}

absl::StatusOr<std::string> ContinuousBatchingExecutor::SaveSession(const ActiveRequest& r) {
  ABCD_ASSIGN_OR_RETURN(std::string state, backend_->Snapshot(r.sequence));
  ABCD_ASSIGN_OR_RETURN(StatePool::SnapshotHeader header, StatePool::ReadSnapshotHeader(state));
  SequenceBlob blob;
  blob.model = options_.model_name;
  blob.fingerprint = header.fingerprint;
  blob.tokens = r.context;
  blob.folded = header.position;
  blob.state = std::move(state);
  return EncodeSequenceBlob(blob);
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
  // Prefix snapshots this request was to take will not come: others must not wait for them.
  if (r.snapshot_at > 0) {
    prefix_cache_.ClearPending(std::span(r.prompt_ids).first(r.snapshot_at));
    r.snapshot_at = 0;
  }
  if (r.snapshot_end_at > 0) {
    prefix_cache_.ClearPending(std::span(r.prompt_ids).first(r.snapshot_end_at));
    r.snapshot_end_at = 0;
  }
  // Speculation: a token inside a verified draft ended r; its state goes back to that token
  // (for the session blob and the prefix cache; a failed request's state is only released).
  if (!status.ok()) r.rollback_row = -1;
  if (absl::Status rolled = RollBack(r); !rolled.ok()) status = rolled;
  GenerationEvent event;
  if (status.ok() && r.request.save_state) {
    absl::StatusOr<std::string> saved = SaveSession(r);
    if (saved.ok()) {
      event.saved_state = *std::move(saved);
      event.session_tokens = static_cast<int64_t>(r.context.size());
    } else {
      status = saved.status();
    }
  }
  if (status.ok()) CacheFinalState(r);
  ReleaseStates(r);
  if (r.admitted) reserved_bytes_ -= r.reserved_bytes;
  ChoiceGroup& group = *r.group;
  const int completion = r.beam_search() ? static_cast<int>(tokens.size()) : r.generated_tokens();
  group.completion_tokens += completion;
  if (!status.ok() && group.status.ok()) group.status = status;
  // A request that ends before its choices were forked closes all of them.
  group.open -= group.n > 1 && !r.forked ? group.open : 1;
  event.index = r.index;
  event.token_ids = std::move(tokens);
  event.text = std::move(text);
  event.choice_finished = true;
  event.finish_reason = reason;
  event.status = status;
  event.prompt_tokens = r.prompt_tokens();
  event.cached_prompt_tokens = static_cast<int>(r.cached_tokens);
  event.completion_tokens = group.n == 1 ? completion : group.completion_tokens;
  AttachLogprobs(r, event);
  const bool last = group.open == 0;
  if (last && options_.observer != nullptr) {
    options_.observer->OnRequestFinished(group.status, event.prompt_tokens, group.completion_tokens,
                                         absl::ToDoubleSeconds(absl::Now() - r.enqueued));
  }
  if (group.n == 1) {
    event.finished = true;
    group.callback(std::move(event));
    return;
  }
  group.callback(std::move(event));
  if (!last) return;
  GenerationEvent final_event;
  final_event.finished = true;
  final_event.choice_finished = true;
  final_event.finish_reason = reason;
  final_event.status = group.status;
  final_event.prompt_tokens = r.prompt_tokens();
  final_event.cached_prompt_tokens = static_cast<int>(r.cached_tokens);
  final_event.completion_tokens = group.completion_tokens;
  group.callback(std::move(final_event));
}

bool ContinuousBatchingExecutor::ForkChoices(ActiveRequest& r,
                                             std::vector<std::unique_ptr<ActiveRequest>>* out) {
  const int n = r.group->n;
  std::vector<SequenceId> forks;
  for (int i = 1; i < n; ++i) {
    absl::StatusOr<SequenceId> fork = backend_->Fork(r.sequence);
    if (!fork.ok()) {
      for (SequenceId id : forks) backend_->Release(id);
      Finish(r, fork.status(), FinishReason::kLength);
      return false;
    }
    forks.push_back(*fork);
  }
  // The request's reservation is split among its choices, so each returns its share.
  const int64_t share = r.reserved_bytes / n;
  for (int i = 1; i < n; ++i) {
    auto choice = std::make_unique<ActiveRequest>();
    choice->id = r.id;
    choice->index = i;
    choice->request = r.request;
    choice->request.sampling.seed += static_cast<uint64_t>(i);
    choice->group = r.group;
    choice->prompt_ids = r.prompt_ids;
    choice->source_ids = r.source_ids;
    choice->history_tokens = r.history_tokens;
    choice->reserved_bytes = share;
    choice->enqueued = r.enqueued;
    choice->admitted = true;
    choice->encoded = true;
    choice->forked = true;
    choice->cached_tokens = r.cached_tokens;
    choice->sequence = forks[i - 1];
    choice->has_sequence = true;
    choice->prefilled = r.prefilled;
    choice->speculative = r.speculative;
    choice->pacer = DraftPacer(r.speculative.enabled() ? r.speculative.k : 0);
    choice->sampler = std::make_unique<Sampler>(choice->request.sampling);
    if (r.constraint != nullptr) {
      // Its own state (the same as r's: nothing is sampled yet), sharing r's mask cache.
      choice->constraint = std::make_unique<TokenConstraint>(*r.constraint);
    }
    choice->text =
        std::make_unique<TextStream>(tokenizer_, choice->request.stop, choice->prompt_ids);
    choice->context = r.context;
    out->push_back(std::move(choice));
  }
  r.reserved_bytes -= share * (n - 1);
  r.forked = true;
  return true;
}

}  // namespace executor_internal
}  // namespace abcd
