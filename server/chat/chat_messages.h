// A request's chat "messages" (HTTP and gRPC alike) validated into the value a chat template
// renders: an array of at least one {"role": "system"|"user"|"assistant", "content": string |
// [{"type": "text", "text": string}, ...]}; text parts are joined with "\n" (as vLLM does for
// templates that expect a string). Each message becomes {"role", "content"} (strings), nothing
// else. Errors are INVALID_ARGUMENT naming the field under `field`:
// "messages[2].role must be one of system, user, assistant, got \"tool\"".
//
// Thread-safety: a pure function.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

absl::StatusOr<Value> ParseChatMessages(const nlohmann::json& messages,
                                        absl::string_view field = "messages");

}  // namespace abcd::chat
