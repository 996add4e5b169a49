// Executor: the small surface a frontend needs to serve one model with continuous batching.
//
//   Enqueue(request, callback) -> id   Cancel(id)   Shutdown()   LatestStats()
//
// One engine thread owns the model's DecodeBackend (CPU: Model + StatePool; CUDA: CudaModel)
// and runs iterations: admit waiting requests that fit the backend's capacity (CapacityScheduler),
// prefill them in chunks sized from a per-iteration time budget (batch_planner.h) so running
// streams are not stalled by more than about one decode step, run one
// batched decode step for every running sequence, sample, emit events and retire finished or
// cancelled sequences (their state is released in that same iteration). Frontends never block the
// loop: callbacks run on the engine thread and must only hand the event over (e.g. queue it and
// wake a writer).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/backend/decode_backend.h"
#include "engine/model/model.h"
#include "engine/sampling/json_grammar.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/finish_reason.h"
#include "engine/scheduler/prefix_cache.h"
#include "engine/scheduler/speculation.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

using RequestId = int64_t;

struct GenerationRequest {
  std::string prompt;  // decoder-only: the text to continue
  // Decoder-only: the prompt as token ids instead of text (then `prompt` must be empty). bos is
  // prepended as for text. Each id must be in [0, vocab_size).
  std::vector<int32_t> prompt_token_ids;
  std::string source;   // encoder-decoder: the text to translate
  int max_tokens = 16;  // tokens to generate, >= 1 (0 with prompt_logprobs: only score the prompt)
  SamplingParams sampling;        // temperature 0 = greedy
  std::vector<std::string> stop;  // end when the text contains one (not returned)
  bool ignore_eos = false;
  int beam_size = 1;  // > 1: beam search (encoder-decoder only), one final event
  // Decoder-only: choices sampled from one prefill (the state is forked n ways after the
  // prompt). Choice i samples with seed sampling.seed + i, so it is reproducible on its own.
  // Admission charges n sequences. Not with beam search or a session.
  int n = 1;
  absl::Time deadline = absl::InfiniteFuture();
  // Sessions (decoder-only). `resume_state`: a SequenceBlob (engine/state/sequence_blob.h) saved
  // by an earlier request; the prompt is appended to everything it has seen and decoding goes on
  // from its state, so only the new prompt is prefilled. FAILED_PRECONDITION when the blob is
  // from another model, INVALID_ARGUMENT when it is corrupt. `save_state`: the final event of an
  // OK request carries the blob of the state after it (prompt and generated tokens included).
  std::string resume_state;
  bool save_state = false;
  // >= 0: every generated token's log-probability and this many most likely alternatives
  // (at most kMaxTopLogprobs), from the raw logits (sampling/logprobs.h). -1: none.
  int logprobs = -1;
  // Decoder-only, n = 1, no session: the prompt's tokens scored too (OpenAI's echo with
  // logprobs), on the first event; the prefix cache is not used for such a request.
  bool prompt_logprobs = false;
  // Speculative decoding (speculation.h); unset: ExecutorOptions::speculative. Decoding
  // without beam search on a backend with checkpoints (the CPU); elsewhere plain decoding.
  std::optional<SpeculativeParams> speculative;
  // Constrained output (decoder-only): the generated text is one JSON value of this grammar
  // (engine/sampling/json_grammar.h; JsonGrammar::AnyObject() for OpenAI's json_object). Each
  // step's logits are masked to the tokens that continue it (after penalties and bias, before
  // the draw; log-probabilities stay the model's), eos only where the value is complete, and
  // the choice ends with FinishReason::kStop when nothing may follow it. Such a row is
  // sampled on the host. Null: free text.
  std::shared_ptr<const JsonGrammar> response_format;
};

// What one choice of a request produced since its previous event. A choice's last event has
// choice_finished = true and its finish reason. The request's last event has finished = true
// and either an OK status or the error (CANCELLED, DEADLINE_EXCEEDED, ...); with n = 1 that is
// the same event as the choice's last. With n > 1 the choices' events interleave, each carrying
// its `index`, and the request's last event (index 0, no tokens) follows every choice's last.
struct GenerationEvent {
  int index = 0;  // the choice, in [0, n)
  std::vector<int32_t> token_ids;
  std::string text;  // new text; text that may begin a stop string is held back until resolved
  bool choice_finished = false;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;  // the choice's, when choice_finished
  absl::Status status;
  int prompt_tokens = 0;         // this request's prompt (a session's history not included)
  int cached_prompt_tokens = 0;  // of those, restored from the prefix cache instead of prefilled
  int completion_tokens = 0;     // all choices together
  int64_t session_tokens = 0;    // with save_state: tokens the saved session has seen
  std::string saved_state;       // final OK event with save_state: the SequenceBlob
  std::vector<TokenLogprobs> logprobs;  // with request.logprobs >= 0: one per token_ids entry
  // With request.logprobs >= 0, on the choice's first event with tokens: the ids its text
  // follows (TextStream::ContextTail of the prompt with bos and a session's history), so a
  // frontend decodes each token's text after them as the engine decodes the text.
  std::vector<int32_t> preceding_token_ids;
  // With request.prompt_logprobs, on the choice's first event: the prompt's ids (bos not
  // included) and, one per id, its log-probability given bos and the ids before it.
  std::vector<int32_t> prompt_token_ids;
  std::vector<TokenLogprobs> prompt_logprobs;
};

using EventCallback = std::function<void(GenerationEvent event)>;

// Published once per iteration by the engine thread; read without touching the loop.
struct ExecutorStats {
  int64_t running_sequences = 0;
  int64_t waiting_requests = 0;
  int64_t state_bytes_in_use = 0;
  int64_t state_bytes_capacity = 0;
  int64_t kv_cache_bytes = 0;  // softmax layers' share of state_bytes_in_use
  // Released sequences' KV storage kept for the next ones (not in state_bytes_in_use; in use
  // plus spare stay within the capacity).
  int64_t kv_cache_spare_bytes = 0;
  // The prefix cache (ExecutorOptions::prefix_cache_bytes); the counters are cumulative.
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_entries = 0;
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_evictions = 0;
  PrefixCacheCounters prefix_cache_counters;  // lookups by outcome, missed tokens by reason
  int64_t iterations = 0;
  int64_t warmup_tokens = 0;  // prompt rows the start-up warm-up fed (ExecutorOptions)
  bool draining = false;
  // Empty while the backend serves; else why it cannot (DecodeBackend::Health): the Executor
  // has ended every request and answers UNAVAILABLE from then on.
  std::string backend_failure;
};

// Per-request and per-iteration figures for metrics; called on the engine thread, must be cheap.
class ExecutorObserver {
 public:
  virtual ~ExecutorObserver() = default;
  virtual void OnIteration(int64_t batch_size, const ExecutorStats& stats) {}
  virtual void OnFirstToken(double seconds_since_enqueue) {}
  virtual void OnToken(double seconds_since_previous_token) {}
  // Tokens as they are generated (each sampled token when it is emitted, a beam search's when
  // it ends), so a counter moves while a long stream runs; OnRequestFinished's
  // completion_tokens are the same tokens again, per request.
  virtual void OnTokensGenerated(int tokens) {}
  virtual void OnRequestFinished(const absl::Status& status, int prompt_tokens,
                                 int completion_tokens, double seconds) {}
  // A speculative verify step: `drafted` tokens proposed, `accepted` of them kept.
  virtual void OnSpeculation(int drafted, int accepted) {}
  // An iteration whose prompt tokens overdue prompts raised above the time policy's share
  // (ExecutorOptions::prefill_deadline_ms).
  virtual void OnOverduePrefill() {}
};

struct ExecutorOptions {
  int64_t state_budget_bytes = int64_t{1} << 30;  // Create(Model&): the CPU backend's pool
  int cpu_threads = 1;                            // Create(Model&): the CPU backend's threads
  cpu::LinearProducts cpu_products = cpu::LinearProducts::kFloat32;  // and its bf16 products
  int max_waiting_requests = 256;   // beyond this Enqueue answers RESOURCE_EXHAUSTED
  int max_running_sequences = 256;  // batch size cap
  int prefill_token_budget = 512;   // most prompt tokens prefilled per iteration (hard cap)
  // kTime: while sequences decode, an iteration's prompt tokens are sized from the measured
  // costs so that prefill adds at most about max(prefill_step_share x one decode step of all
  // running sequences, iteration_budget_ms); with nothing decoding, prefill goes at
  // prefill_token_budget. kTokens: always the token budget.
  PrefillPolicy prefill_policy = PrefillPolicy::kTime;
  double iteration_budget_ms = 0;   // kTime: the least extra time prefill may take, >= 0
  double prefill_step_share = 1.0;  // kTime: in (0, 16]
  // kTime: the TTFT bound. A prompt whose request has waited longer than this since its enqueue
  // is overdue, and each iteration then takes at least all overdue prompts' remaining tokens
  // (the oldest first, up to prefill_token_budget), even if that makes the iteration long for
  // the running streams (an inter-token latency spike). A lone prompt never waits this long;
  // a wave of arrivals does. In [0, 1000000]; 0: off.
  double prefill_deadline_ms = 1000;
  int max_prompt_tokens = 4096;  // longer prompts are INVALID_ARGUMENT
  // Encoder-decoder: longer sources (with their eos) are INVALID_ARGUMENT. One source is encoded
  // in one backend call, so this also bounds how long one iteration can take.
  int max_source_tokens = 512;
  // Encoder work between decode steps: at most one source is encoded per iteration, and while
  // other sequences decode, sources longer than this wait until that many tokens per iteration
  // have accrued for them; a source within it can be encoded on every second iteration ahead
  // of older, longer ones. Cancel, deadline and shutdown are taken between sources.
  int encode_token_budget = 128;
  int max_new_tokens = 4096;           // max_tokens above this is INVALID_ARGUMENT
  int max_batch_source_tokens = 8192;  // EnqueueBatch: source tokens of a batch together
  int max_choices = 16;                // n above this is INVALID_ARGUMENT
  // Decoder-only: state snapshots of prompt prefixes kept for reuse (prefix_cache.h), in bytes;
  // 0 turns the cache off. Outputs are identical with and without it.
  int64_t prefix_cache_bytes = 0;
  // Decoder-only: prompt rows fed once through a scratch sequence (then released) when the
  // engine thread starts, before any request, so that the first request does not pay for
  // growing and faulting in the engine's buffers; at most prefill_token_budget and the model's
  // positions. 0: none.
  int warmup_tokens = 0;
  // The speculative decoding of requests that do not choose (off by default).
  SpeculativeParams speculative;
  std::string model_name;                // written into saved session blobs
  ExecutorObserver* observer = nullptr;  // not owned; may be null
};

// Refusal before work: a text longer than this many bytes per token of its limit is refused
// before it is tokenized (a SentencePiece piece of this project's vocabularies is at most 16
// bytes, so no text within the token limit is refused unless it is mostly repeated whitespace,
// which the tokenizer collapses).
inline constexpr int64_t kMaxInputBytesPerToken = 16;

// INVALID_ARGUMENT naming `field` when `bytes` exceeds kMaxInputBytesPerToken * token_limit.
absl::Status CheckInputBytes(absl::string_view field, size_t bytes, int64_t token_limit);

class Executor {
 public:
  // Runs on `backend`; `tokenizer` must outlive the executor. Starts the engine thread.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(std::unique_ptr<DecodeBackend> backend,
                                                          const Tokenizer& tokenizer,
                                                          const ExecutorOptions& options);
  // The CPU backend over `model` with a pool of options.state_budget_bytes; `model` and
  // `tokenizer` must outlive the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Model& model,
                                                          const Tokenizer& tokenizer,
                                                          const ExecutorOptions& options);
  virtual ~Executor() = default;

  // Validates (INVALID_ARGUMENT naming the field), refuses a prompt/source by its size before
  // tokenizing it (CheckInput), tokenizes and queues the request. INVALID_ARGUMENT when the
  // request can never fit the state budget (naming it); RESOURCE_EXHAUSTED when the waiting
  // queue is full; UNAVAILABLE once draining. `callback` receives every event, the last with
  // finished = true, exactly once per request that was accepted.
  virtual absl::StatusOr<RequestId> Enqueue(GenerationRequest request, EventCallback callback) = 0;
  // A batch of requests accepted all or none: each is checked as by Enqueue and, for an
  // encoder-decoder model, their source tokens together must not exceed
  // options.max_batch_source_tokens (INVALID_ARGUMENT "texts[i]: ..." or naming the total).
  // callbacks.size() must equal requests.size(). Ids are in request order.
  // The default (for executors without a batch limit) enqueues them one by one and, if a later
  // one is refused, cancels the accepted ones (their callbacks end with CANCELLED).
  virtual absl::StatusOr<std::vector<RequestId>> EnqueueBatch(
      std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks);
  // The size check Enqueue makes before tokenizing, for frontends that want to refuse before
  // they copy the text: `field` names it in the error ("prompt", "text").
  // The default accepts every size.
  virtual absl::Status CheckInput(absl::string_view field, size_t bytes) const;
  // Whether `blob` would resume on this executor's model: INVALID_ARGUMENT when corrupt,
  // FAILED_PRECONDITION naming both models when it is another model's (or this backend cannot
  // restore states). Any thread; the default refuses every blob.
  virtual absl::Status CheckSessionState(absl::string_view blob) const;
  // Ends the request with CANCELLED and frees its state within one iteration. Unknown or
  // finished ids are ignored.
  virtual void Cancel(RequestId id) = 0;
  // Stop accepting new requests (UNAVAILABLE); running and waiting ones continue.
  virtual void StartDraining() = 0;
  // Cancels whatever is left and joins the engine thread.
  virtual void Shutdown() = 0;
  virtual ExecutorStats LatestStats() const = 0;
  // Any thread may call the backend's constant accessors (see decode_backend.h); the rest
  // belongs to the engine thread.
  virtual const DecodeBackend& backend() const = 0;
};

}  // namespace abcd
