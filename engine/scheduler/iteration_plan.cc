#include "engine/scheduler/iteration_plan.h"

#include <algorithm>

#include "engine/scheduler/speculation.h"

namespace abcd {
namespace executor_internal {
namespace {

// Where r's prefill may go this iteration: a due prefix snapshot (unless it is cut from a later
// state), else the prompt's end.
int64_t PrefillUntil(const ActiveRequest& r) {
  if (r.snapshots_cut) return static_cast<int64_t>(r.prompt_ids.size());
  if (r.snapshot_at > r.prefilled) return r.snapshot_at;
  if (r.snapshot_end_at > r.prefilled) return r.snapshot_end_at;
  return static_cast<int64_t>(r.prompt_ids.size());
}

// The draft r verifies this step: empty unless r speculates and a draft is found. Drafts stop
// one token short of max_tokens, so a verify step never feeds a token that plain decoding
// would not.
std::vector<int32_t> DraftFor(const ActiveRequest& r) {
  if (!r.speculative.enabled()) return {};
  const int remaining = r.request.max_tokens - r.generated_tokens();
  const int k = std::min(r.pacer.Budget(), remaining - 1);
  return k > 0 ? ProposeNgramDraft(r.context, k) : std::vector<int32_t>();
}

// r's decode row, and after it the draft's rows: every row but the last saves a checkpoint
// (DecodeBackend::Rollback).
void PlanDraft(const ActiveRequest& r, size_t owner, std::vector<int32_t> draft,
               IterationPlan& plan) {
  const bool speculate = !draft.empty();
  plan.rows.push_back({r.sequence, r.pending_token, true, speculate});
  plan.row_owners.push_back(owner);
  if (!speculate) return;
  for (size_t i = 0; i < draft.size(); ++i) {
    plan.rows.push_back({r.sequence, draft[i], true, i + 1 < draft.size()});
    plan.row_owners.push_back(owner);
  }
  plan.drafts.push_back({owner, std::move(draft)});
}

// One decode token per running sequence whose prompt is in.
void PlanDecodeRows(std::span<const std::unique_ptr<ActiveRequest>> running, bool backend_samples,
                    IterationPlan& plan) {
  for (size_t i = 0; i < running.size(); ++i) {
    const ActiveRequest& r = *running[i];
    if (!r.prefill_done()) continue;
    // A verify step needs the logits of every row on the host; a speculating request without a
    // draft this step is sampled by the backend like any other.
    std::vector<int32_t> draft = r.beam_search() ? std::vector<int32_t>() : DraftFor(r);
    if (draft.empty() && SampledByBackend(r, backend_samples)) {
      const auto generated = static_cast<uint64_t>(r.context.size() - r.prompt_ids.size());
      plan.sampled_rows.push_back({r.sequence, r.pending_token, r.request.sampling, generated});
      plan.sampled_owners.push_back(i);
    } else if (r.beam_search()) {
      for (const Beam& beam : r.beams) {
        plan.rows.push_back({beam.sequence, beam.tokens.back(), true});
        plan.row_owners.push_back(i);
      }
    } else {
      PlanDraft(r, i, std::move(draft), plan);
    }
  }
  plan.decode_rows = static_cast<int64_t>(plan.rows.size() + plan.sampled_rows.size());
}

}  // namespace

bool SampledByBackend(const ActiveRequest& r, bool backend_samples) {
  return backend_samples && !r.beam_search() && !NeedsHostSampling(r.request.sampling) &&
         r.request.logprobs < 0 && r.request.response_format == nullptr;
}

IterationPlan PlanIteration(std::span<const std::unique_ptr<ActiveRequest>> running,
                            const PlanParams& params) {
  IterationPlan plan;
  PlanDecodeRows(running, params.backend_samples, plan);
  const bool deadline_on =
      params.prefill_policy == PrefillPolicy::kTime && params.prefill_deadline_ms > 0;
  const absl::Duration deadline = absl::Milliseconds(params.prefill_deadline_ms);
  std::vector<int64_t> remaining;
  std::vector<int64_t> overdue;  // the overdue prompts' remaining tokens, 0 for the others
  int64_t prefilling = 0;
  int64_t overdue_tokens = 0;
  for (const auto& r : running) {
    remaining.push_back(r->encoded && !r->done ? PrefillUntil(*r) - r->prefilled : 0);
    prefilling += remaining.back() > 0;
    const bool late = deadline_on && remaining.back() > 0 && params.now - r->enqueued > deadline;
    overdue.push_back(late ? remaining.back() : 0);
    overdue_tokens += overdue.back();
  }
  int64_t prefill_tokens = params.prefill_token_budget;
  if (params.prefill_policy == PrefillPolicy::kTime) {
    const StepCostModel unmeasured;
    const StepCostModel& costs = params.costs != nullptr ? *params.costs : unmeasured;
    PrefillSizing sizing = {
        .decode_rows = plan.decode_rows,
        .decode_step_seconds = costs.DecodeStepSeconds(plan.decode_rows + prefilling),
        .prompt_row_seconds = costs.PromptRowSeconds(),
        .iteration_budget_seconds = params.iteration_budget_ms / 1000.0,
        .decode_step_share = params.prefill_step_share,
        .token_budget = params.prefill_token_budget,
        .overdue_tokens = 0,
    };
    prefill_tokens = PrefillTokensForIteration(sizing);
    if (overdue_tokens > 0) {
      // Sized again with the overdue prompts, to tell whether they widened the iteration.
      const int64_t share = prefill_tokens;
      sizing.overdue_tokens = overdue_tokens;
      prefill_tokens = PrefillTokensForIteration(sizing);
      plan.overdue_widened = prefill_tokens > share;
    }
  }
  std::vector<PrefillChunk> chunks;
  if (overdue_tokens > 0) {
    for (size_t i = 0; i < remaining.size(); ++i) remaining[i] -= overdue[i];  // the others
    chunks = PlanPrefillOverdueFirst(overdue, remaining, prefill_tokens);
  } else {
    chunks = PlanPrefill(remaining, prefill_tokens);
  }
  for (const PrefillChunk& chunk : chunks) {
    const ActiveRequest& r = *running[chunk.index];
    plan.chunks.push_back({static_cast<size_t>(chunk.index), r.prefilled, chunk.tokens});
    for (int64_t t = r.prefilled; t < r.prefilled + chunk.tokens; ++t) {
      const bool last = t + 1 == static_cast<int64_t>(r.prompt_ids.size());
      // Prompt log-probabilities need every prompt row's logits, not only the last's.
      const bool want_logits = last || r.request.prompt_logprobs;
      plan.rows.push_back({r.sequence, r.prompt_ids[t], want_logits});
      if (want_logits) plan.row_owners.push_back(static_cast<size_t>(chunk.index));
    }
  }
  return plan;
}

}  // namespace executor_internal
}  // namespace abcd
