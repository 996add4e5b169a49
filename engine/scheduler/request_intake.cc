#include "engine/scheduler/request_intake.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd {
namespace executor_internal {

absl::Status RequestIntake::Validate(const GenerationRequest& request) const {
  const bool encoder_decoder = config_.is_encoder_decoder();
  const bool session = !request.resume_state.empty() || request.save_state;
  if (encoder_decoder) {
    if (request.source.empty()) return absl::InvalidArgumentError("text must not be empty");
    if (!request.prompt_token_ids.empty()) {
      return absl::InvalidArgumentError(
          "prompt_token_ids: an encoder-decoder model translates text");
    }
    if (session) {
      return absl::InvalidArgumentError("session_id: sessions need a decoder-only model");
    }
  } else if (request.prompt.empty() && request.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("prompt must not be empty");
  } else if (!request.prompt.empty() && !request.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("prompt: give text or token ids, not both");
  }
  const int min_tokens = request.prompt_logprobs ? 0 : 1;
  if (request.max_tokens < min_tokens || request.max_tokens > options_.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens must be in [", min_tokens, ", ", options_.max_new_tokens, "], got ",
        request.max_tokens, request.max_tokens == 0 ? " (0 only with prompt_logprobs)" : ""));
  }
  if (request.logprobs < -1 || request.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", kMaxTopLogprobs, "], got ", request.logprobs));
  }
  if (request.prompt_logprobs &&
      (encoder_decoder || request.n > 1 || request.beam_size > 1 || session)) {
    return absl::InvalidArgumentError(
        "echo: prompt log-probabilities need a decoder-only model, n = 1 and no session");
  }
  if (request.response_format != nullptr && encoder_decoder) {
    return absl::InvalidArgumentError("response_format: needs a decoder-only model");
  }
  ABCD_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias: token id ", id,
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  if (request.speculative.has_value()) {
    ABCD_RETURN_IF_ERROR(ValidateSpeculativeParams(*request.speculative, "speculative"));
  }
  if (request.beam_size < 1 || request.beam_size > kMaxBeamSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_size must be in [1, ", kMaxBeamSize, "], got ", request.beam_size));
  }
  if (request.n < 1 || request.n > options_.max_choices) {
    return absl::InvalidArgumentError(
        absl::StrCat("n must be in [1, ", options_.max_choices, "], got ", request.n));
  }
  if (request.n > 1 && request.beam_size > 1) {
    return absl::InvalidArgumentError("n: must be 1 with beam search");
  }
  if (request.n > 1 && session) return absl::InvalidArgumentError("n: must be 1 with a session");
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

absl::StatusOr<std::vector<int32_t>> RequestIntake::PromptTokens(
    const GenerationRequest& request) const {
  if (config_.is_encoder_decoder() || request.prompt_token_ids.empty()) {
    const bool encoder_decoder = config_.is_encoder_decoder();
    const std::string& input = encoder_decoder ? request.source : request.prompt;
    // Refusal before work: the size bounds the tokens, so a hopeless text is never tokenized.
    ABCD_RETURN_IF_ERROR(CheckInput(encoder_decoder ? "text" : "prompt", input.size()));
    return tokenizer_.Encode(input);
  }
  const std::vector<int32_t>& ids = request.prompt_token_ids;
  if (static_cast<int64_t>(ids.size()) >= options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids has ", ids.size(),
                                                   " tokens, the limit is ",
                                                   options_.max_prompt_tokens - 1, " (and bos)"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids[", i, "] must be in [0, ",
                                                     config_.vocab_size, "), got ", ids[i]));
    }
  }
  return ids;
}

absl::StatusOr<SequenceBlob> RequestIntake::DecodeSession(absl::string_view bytes) const {
  if (config_.is_encoder_decoder()) {
    return absl::InvalidArgumentError("session_id: sessions need a decoder-only model");
  }
  // The header first: another model's blob is a precondition failure, not corruption.
  ABCD_ASSIGN_OR_RETURN(SequenceBlobInfo info, PeekSequenceBlob(bytes));
  if (!options_.model_name.empty() && info.model != options_.model_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session state is of model '", info.model, "', not of model '", options_.model_name, "'"));
  }
  // Checksum, structure, and the state's position against `folded`.
  ABCD_ASSIGN_OR_RETURN(SequenceBlob blob, DecodeSequenceBlob(bytes));
  ABCD_RETURN_IF_ERROR(backend_.CheckSnapshot(blob.state));
  for (int32_t token : blob.tokens) {
    if (token >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("session blob: token ", token, " is outside the vocabulary"));
    }
  }
  return blob;
}

absl::Status RequestIntake::Resume(ActiveRequest& r) const {
  ABCD_ASSIGN_OR_RETURN(SequenceBlob blob, DecodeSession(r.request.resume_state));
  r.request.resume_state = std::string();  // the state now lives in restore_state
  r.prompt_ids = std::move(blob.tokens);
  r.history_tokens = static_cast<int64_t>(r.prompt_ids.size());
  r.prefilled = blob.folded;
  r.restore_state = std::make_shared<const std::string>(std::move(blob.state));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ActiveRequest>> RequestIntake::Prepare(
    GenerationRequest request, EventCallback callback) const {
  ABCD_RETURN_IF_ERROR(Validate(request));
  const ModelConfig& config = config_;
  const bool encoder_decoder = config.is_encoder_decoder();
  const absl::string_view field = encoder_decoder ? "text" : "prompt";
  auto r = std::make_unique<ActiveRequest>();
  ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PromptTokens(request));
  r->request = std::move(request);
  if (!r->request.resume_state.empty()) {
    ABCD_RETURN_IF_ERROR(Resume(*r));
  } else if (config.add_bos || ids.empty() || encoder_decoder) {
    // (A model without add_bos still needs one token to start from when the prompt is empty.)
    r->prompt_ids.push_back(config.bos_id);
  }
  if (encoder_decoder) {
    r->source_ids = std::move(ids);
    r->source_ids.push_back(config.eos_id);
    if (static_cast<int64_t>(r->source_ids.size()) > options_.max_source_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("text is ", r->source_ids.size(),
                                                     " tokens, longer than the limit of ",
                                                     options_.max_source_tokens));
    }
    // abc position (Linformer) encoder / cross layers have no table column past N_src.
    if (const int64_t limit = config.max_source_positions();
        limit > 0 && static_cast<int64_t>(r->source_ids.size()) > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("text: the source (", r->source_ids.size(),
                       " tokens with eos) exceeds the model's max_source_positions (", limit, ")"));
    }
  } else {
    r->prompt_ids.insert(r->prompt_ids.end(), ids.begin(), ids.end());
  }
  r->encoded = r->source_ids.empty();
  const int64_t input_tokens = r->prompt_tokens();
  if (input_tokens > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", input_tokens,
                                                   " tokens, longer than the limit of ",
                                                   options_.max_prompt_tokens));
  }
  // abc position layers (causal Linformer) have no column beyond max_positions.
  if (const int64_t limit = config.max_positions();
      limit > 0 && static_cast<int64_t>(r->prompt_ids.size()) + r->request.max_tokens > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: the prompt (", r->prompt_ids.size(), " tokens) plus max_tokens (",
                     r->request.max_tokens, ") exceeds the model's max_positions (", limit, ")"));
  }
  const int sequences = r->request.beam_size > 1 ? 2 * r->request.beam_size : r->request.n;
  // RequestBytes() only reads constants of the backend, so this thread may call it.
  absl::StatusOr<int64_t> bytes = backend_.RequestBytes(static_cast<int64_t>(r->prompt_ids.size()),
                                                        static_cast<int64_t>(r->source_ids.size()),
                                                        r->request.max_tokens, sequences);
  if (absl::IsResourceExhausted(bytes.status())) {
    // Waiting cannot help: a client error, not an overload to retry.
    return absl::InvalidArgumentError(
        absl::StrCat("request can never fit: ", bytes.status().message()));
  }
  ABCD_RETURN_IF_ERROR(bytes.status());
  r->reserved_bytes = *bytes;
  // Speculation pays for its checkpoints up front; a request they do not fit decodes plainly
  // (drafts stop short of max_tokens, so they need no token beyond it).
  const SpeculativeParams speculative = r->request.speculative.value_or(options_.speculative);
  if (speculative.enabled() && r->request.beam_size == 1 && backend_.checkpoints_supported()) {
    const int64_t checkpoints = sequences * backend_.CheckpointBytes(speculative.k);
    if (r->reserved_bytes + checkpoints <= backend_.capacity_bytes()) {
      r->reserved_bytes += checkpoints;
      r->speculative = speculative;
      r->pacer = DraftPacer(speculative.k);
    }
  }
  r->group = std::make_shared<ChoiceGroup>();
  r->group->callback = std::move(callback);
  r->group->n = r->request.n;
  r->group->open = r->request.n;
  r->enqueued = absl::Now();
  r->context = r->prompt_ids;
  return r;
}

absl::StatusOr<std::vector<std::unique_ptr<ActiveRequest>>> RequestIntake::PrepareBatch(
    std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) const {
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
  return rs;
}

}  // namespace executor_internal
}  // namespace abcd
