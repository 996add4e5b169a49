// One iteration of the engine loop, as plain data: which rows go to the backend and whose they
// are. The loop is plan -> run -> apply (continuous_batching_executor.cc):
//   PlanIteration(running, params) -> IterationPlan   what to run (this file; no backend)
//   the backend's DecodeAndSample / Decode calls       run it
//   ApplyOutput(plan, output)                          route tokens and logits (apply_output.cc)
// Rows, in order: one decode row per sampling request (or one per beam; a request with
// speculation that has a draft: 1 + its draft's length, speculation.h), then prefill chunks of
// the prompts under this iteration's token budget. Decode rows whose next token the backend
// samples itself (no host-side penalty or log-probabilities need their logits) are kept apart.
// Owners are indices into the `running` list the plan was made from.
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/backend/decode_backend.h"
#include "engine/scheduler/active_request.h"
#include "engine/scheduler/batch_planner.h"

namespace abcd {
namespace executor_internal {

// A prompt chunk prefilled this iteration: running[request]'s tokens [start, start + tokens).
struct PlannedChunk {
  size_t request = 0;
  int64_t start = 0;
  int64_t tokens = 0;
};

// Speculative decoding: running[request] verifies `tokens` after its pending token this
// iteration (its rows: the pending token, then the drafts, all with logits).
struct PlannedDraft {
  size_t request = 0;
  std::vector<int32_t> tokens;
};

struct IterationPlan {
  // Rows whose logits come back (want_logits) or that only fold a prompt token, in row order:
  // the decode rows (a beam search request has one per beam), then the prefill chunks' rows.
  std::vector<DecodeRow> rows;
  // One per row with want_logits, in row order: the owner's index in `running`. A request's
  // logits rows are consecutive.
  std::vector<size_t> row_owners;
  // Decode rows the backend samples (DecodeBackend::DecodeAndSample) and their owners.
  std::vector<SampledRow> sampled_rows;
  std::vector<size_t> sampled_owners;
  std::vector<PlannedChunk> chunks;
  std::vector<PlannedDraft> drafts;
  int64_t decode_rows = 0;  // decode rows of both kinds (the rest of `rows` are prompt rows)
  // kTime with a prefill deadline: overdue prompts raised the prompt tokens above the time
  // policy's share this iteration (PrefillSizing::overdue_tokens).
  bool overdue_widened = false;

  bool empty() const { return rows.empty() && sampled_rows.empty(); }
  int64_t prompt_rows() const {
    return static_cast<int64_t>(rows.size() + sampled_rows.size()) - decode_rows;
  }
};

// What the backend returned for a plan (the run step).
struct IterationOutput {
  absl::Status sampled_status;          // DecodeAndSample's; OK when there were no sampled rows
  std::vector<int32_t> sampled_tokens;  // one per sampled row when OK
  absl::Status decode_status;           // Decode's; OK when there were no rows
  std::span<const float> logits;        // row_owners.size() x vocabulary floats when OK
};

// How this iteration's prompt tokens are sized (ExecutorOptions' prefill fields) and what the
// backend can do.
struct PlanParams {
  bool backend_samples = false;  // DecodeBackend::samples_tokens()
  PrefillPolicy prefill_policy = PrefillPolicy::kTime;
  int64_t prefill_token_budget = 512;
  double iteration_budget_ms = 0;
  double prefill_step_share = 1.0;
  // kTime: a prompt whose request was enqueued more than this long before `now` is overdue, and
  // the iteration takes all the overdue prompts' remaining tokens (up to prefill_token_budget);
  // 0: off. Only prompts that can be prefilled count (encoded, tokens left).
  double prefill_deadline_ms = 0;
  absl::Time now;                        // the current time, passed in so the plan stays pure
  const StepCostModel* costs = nullptr;  // kTime: the measured row costs; null: none measured
};

// Whether the backend samples r's next token itself (no host-side penalty or log-probabilities
// need the logits).
bool SampledByBackend(const ActiveRequest& r, bool backend_samples);

// The rows of one iteration over the running requests (finished ones already removed). Prefill
// stops where a prefix snapshot is due and starts once a request's source is encoded.
IterationPlan PlanIteration(std::span<const std::unique_ptr<ActiveRequest>> running,
                            const PlanParams& params);

}  // namespace executor_internal
}  // namespace abcd
