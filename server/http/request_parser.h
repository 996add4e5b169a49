// Validation at the door for the HTTP/JSON API: request bodies -> engine requests.
//
// Bodies are parsed without exceptions and every field is type- and range-checked, so nothing a
// client sends reaches the engine unchecked. Errors are INVALID_ARGUMENT with a message that
// starts with the JSON field's name (e.g. "max_tokens must be an integer in [1, 4096], got -5");
// unknown fields are ignored, as OpenAI clients send many optional ones.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/scheduler/executor.h"
#include "nlohmann/json.hpp"

namespace abcd::http {

struct ParseLimits {
  int max_tokens_limit = 4096;  // upper bound of max_tokens (the executor's max_new_tokens)
  int max_batch_texts = 64;     // upper bound of len(texts) in /v1/translate
  int max_beam_size = 16;
  int max_stop_strings = 16;
  int max_choices = 16;          // upper bound of n (the executor's max_choices)
  int max_prompt_tokens = 4096;  // upper bound of a token-id prompt's length
};

// POST /v1/completions.
struct CompletionRequest {
  std::string model;  // empty: the default language model
  GenerationRequest generation;
  bool stream = false;
  std::string session_id;      // "new", an id, or empty (no session)
  bool echo = false;           // the prompt's text (and with logprobs its scores) comes first
  bool include_usage = false;  // stream_options.include_usage: a usage chunk before [DONE]
};

// POST /v1/translate: {"text": ...} or {"texts": [...]} (batch = true).
struct TranslateRequest {
  std::string model;  // empty: the default translation model
  std::vector<std::string> texts;
  bool batch = false;
  int beam_size = 4;
  int max_tokens = 128;
};

// OpenAI completion fields: model, prompt (a string, [string], or an array of token ids ->
// generation.prompt_token_ids), max_tokens (default 16, or max_tokens_limit when lower),
// temperature (1.0), top_p, top_k, repetition_penalty, seed, min_p, presence_penalty,
// frequency_penalty, logit_bias ({"<token id>": bias}), stop (string or [string]), stream,
// n (1..max_choices; must be 1 with a session); best_of must be 1 when given; logprobs (0..20 ->
// generation.logprobs); echo (bool; not with n > 1 or a session; with logprobs it sets
// generation.prompt_logprobs and max_tokens may be 0); stream_options ({"include_usage": bool},
// only with stream); response_format (ParseResponseFormat); ignore_eos (bool), session_id ("new"
// or an id) and speculative ({"mode": "ngram" | "off", "k": 1..16} -> generation.speculative)
// are extensions. Sampling
// fields are also checked with ValidateSamplingParams (messages use the JSON names).
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ParseLimits& limits);
// The same fields of a body parsed already (chat_route.cc): `object`, and `ordered` (the same
// body in its key order) for response_format's schema.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(const nlohmann::json& object,
                                                         const nlohmann::ordered_json& ordered,
                                                         const ParseLimits& limits);

// OpenAI's response_format in `object` (a parsed body; `ordered`: the same body parsed in its
// key order, the order properties are generated in): absent, null or {"type": "text"} -> null
// (free text); {"type": "json_object"} -> JsonGrammar::AnyObject(); {"type": "json_schema",
// "json_schema": {"name": string, "schema": {...}, "strict": bool, "description": string}} ->
// the schema compiled (engine/sampling/json_grammar.h) from `ordered`. Errors name the field:
// "response_format.json_schema.schema.properties.name.pattern is not supported".
// ParseCompletionRequest reads it the same way.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> ParseResponseFormat(
    const nlohmann::json& object, const nlohmann::ordered_json& ordered);

// POST /tokenize (vLLM's shape): model, prompt (a string, may be empty), add_special_tokens
// (bool, default true: bos first for a language model, eos last for a translation model's
// source, as the engine feeds them).
struct TokenizeRequest {
  std::string model;
  std::string prompt;
  bool add_special_tokens = true;
};
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body);

// POST /detokenize: model, tokens (an array of at most max_prompt_tokens ids >= 0; the model's
// vocabulary bounds them).
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body,
                                                         const ParseLimits& limits);

// text | texts (1..max_batch_texts non-empty strings), beam_size (default 4, 1..max_beam_size),
// max_tokens (default 128, or max_tokens_limit when lower), model.
absl::StatusOr<TranslateRequest> ParseTranslateRequest(absl::string_view body,
                                                       const ParseLimits& limits);

}  // namespace abcd::http
