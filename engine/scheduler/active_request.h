// The engine thread's record of one request (one choice of it, with n > 1) from admission to
// its last event: its tokens, its state in the backend (sequence or beams), sampling, text and
// log-probability bookkeeping, prefix-cache snapshot points. A plain struct, owned by the
// ContinuousBatchingExecutor and touched only on its engine thread once queued.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/backend/decode_backend.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/token_mask.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/speculation.h"
#include "engine/scheduler/text_stream.h"

namespace abcd {
namespace executor_internal {

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
  // With snapshots_cut (a backend whose KV-cache-only states can be cut back to an earlier
  // position, DecodeBackend::SnapshotAt) prefill does not stop there: each is taken once prefill
  // has passed it, cut from the later state, which saves a pass over the weights per snapshot.
  int64_t snapshot_at = 0;
  int64_t snapshot_end_at = 0;
  bool snapshots_cut = false;
  bool cache_checked = false;  // the prefix cache was consulted (once, at admission)

  SequenceId sequence = 0;  // sampling path; beam path during prefill
  bool has_sequence = false;
  int64_t prefilled = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TokenConstraint> constraint;  // request.response_format's state (or null)
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

  // Speculative decoding (speculation.h): on when `speculative` is enabled (its checkpoint
  // bytes are in reserved_bytes). `draft`: the tokens this step verifies after pending_token;
  // `rollback_row`: while accepting them, the verify row whose state the tokens accepted so far
  // correspond to (-1: the state is already right), which Finish restores before it saves.
  SpeculativeParams speculative;
  DraftPacer pacer;
  std::vector<int32_t> draft;
  int rollback_row = -1;

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

}  // namespace executor_internal
}  // namespace abcd
