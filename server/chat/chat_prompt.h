// A conversation -> the prompt ids a served language model prefills: the one path that
// POST /v1/chat/completions, POST /tokenize with messages (server/http/chat_route.h) and gRPC
// Generate with messages (server/grpc/generator_service.cc) share, so the same messages give
// the same ids on both protocols.
//
// `messages` is the JSON array of {"role", "content"} (validated by ParseChatMessages, errors
// naming "messages[i]..."); it is rendered with the model's chat template, its size checked
// as the model's "messages" input, and tokenized by ChatTemplate::EncodePrompt. The ids are the
// prompt as the engine is given it (enqueue them as they are): the engine puts the model's bos
// before them where its tokenizer adds one (PrefilledIds, server/core/model_tokenizer.h, gives
// the ids prefilled, as /tokenize reports them).
// FAILED_PRECONDITION for a model without a chat template or tokenizer (a translation model).
// The render is bounded (ChatTemplate::Render) and runs on the caller's thread: a caller on an
// I/O thread should move it to a worker and pass `cancelled` (polled during the render; true
// ends it with CANCELLED) so a client gone, a deadline or a drain stops it.
//
// Thread-safety: a pure function over the read-only ServedModel.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/core/served_models.h"

namespace abcd::chat {

// `tools` (null: none) is the template's `tools` variable: the request's tool list as given.
absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ServedModel& model,
                                                   const nlohmann::json& messages,
                                                   bool add_generation_prompt,
                                                   const std::function<bool()>& cancelled = nullptr,
                                                   const nlohmann::ordered_json& tools = nullptr);

// A chat session's next turn: the ids to append to a session whose last turn is the model's
// answer (its generated tokens), for `messages`, the NEW messages only. The template renders
// [{"user", "."}, {"assistant", <a marker>}] + messages; the ids are the tokenized text after
// the marker: the template's close of the answer and the new messages with the separators it
// puts between turns (Llama-2's " </s><s>[INST] ... [/INST]", the built-in transcript's
// "\nuser: ...\nassistant:"), no bos. INVALID_ARGUMENT naming "messages" when the template
// refuses the sequence or does not render an assistant's content as given.
// `tools` (null: none) is the template's `tools` variable, as for ChatPromptIds: a template that
// lists the tools before the first turn lists them before the marker (the session's first turn
// had them there), one that renders tool calls and results by them gets them after it.
absl::StatusOr<std::vector<int32_t>> ChatContinuationIds(
    const ServedModel& model, const nlohmann::json& messages, bool add_generation_prompt,
    const std::function<bool()>& cancelled = nullptr,
    const nlohmann::ordered_json& tools = nullptr);

}  // namespace abcd::chat
