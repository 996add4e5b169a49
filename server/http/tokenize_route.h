// POST /tokenize and POST /detokenize in vLLM's (and llama-server's, SGLang's) shapes, answered
// on the I/O thread with the model's tokenizer: no executor, no in-flight place.
//
//   /tokenize   {"model"?, "prompt": "text", "add_special_tokens"?: true}
//               -> {"tokens": [ids], "count": N, "max_model_len": M}
//               {"model"?, "messages": [...], "add_generation_prompt"?: true}: the conversation
//               rendered with the model's chat template (chat_route.h), as a chat completion
//               prefills it (bos first where the model's tokenizer adds one: PrefilledIds,
//               server/core/model_tokenizer.h; add_special_tokens does not apply)
//   /detokenize {"model"?, "tokens": [ids]} -> {"prompt": "text"}
//
// The model is found by ServedModels::Resolve (empty: the default language model; a named
// translation model tokenizes its source text). add_special_tokens puts bos first for a
// language model whose tokenizer adds one (and for an empty prompt: the engine starts from bos)
// and eos last for a translation source, as the engine feeds them, so `count` is
// the prompt_tokens a completion of that prompt reports. max_model_len is the longest prompt
// the server accepts, in tokens with bos (--max_prompt_tokens). Errors name the field (ids
// outside the vocabulary: "tokens[3] ..."); a prompt too large for any token limit is refused
// by its size before it is tokenized.
//
// Thread-safety: pure functions over the read-only ServedModels.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/core/served_models.h"
#include "server/http/request_parser.h"

namespace abcd::http {

// `cancelled` (may be null): as PrepareChat's (chat_route.h), for a body with messages.
absl::StatusOr<nlohmann::json> AnswerTokenize(const ServedModels& models, absl::string_view body,
                                              int max_model_len,
                                              const std::function<bool()>& cancelled = nullptr);
absl::StatusOr<nlohmann::json> AnswerDetokenize(const ServedModels& models, absl::string_view body,
                                                const ParseLimits& limits);

}  // namespace abcd::http
