// A request's chat "messages" (HTTP and gRPC alike) validated into the value a chat template
// renders, as transformers' apply_chat_template passes them:
// - role: "system", "user", "assistant", "tool" or "developer" (the OpenAI SDK's current name
//   for system: passed as "system" unless the template itself handles "developer").
// - content: a string or [{"type": "text", "text": string}, ...] (text parts are joined with
//   "\n", as vLLM does for templates that expect a string). An assistant message may give null
//   (or no content) when it carries `tool_calls`: the template sees "" (as vLLM passes it;
//   most published templates fail on None there: Qwen3, gpt-oss, Granite, Phi-3.5, ...).
// - assistant `tool_calls` ([{"id", "type": "function", "function": {"name", "arguments"}}]:
//   each call an object whose function is an object with a string name, its id a string when
//   given), tool `tool_call_id` (required on a tool message, as OpenAI requires it) and any
//   message's `name` are passed through (strings, or for tool_calls the JSON value, nested at
//   most kMaxToolCallNesting levels). A call's
//   `arguments` reach the template as the JSON value its text holds (OpenAI sends a string;
//   transformers' templates expect a mapping, as vLLM converts it; null or "" is {}), or, with
//   options.arguments_as_text, as JSON text (objects written as json.dumps writes them), for
//   templates that concatenate it (functionary, DeepSeek-V3.1). Text that is not JSON is
//   INVALID_ARGUMENT naming "messages[i].tool_calls[j].function.arguments".
// Nothing else of a message reaches the template. Errors are INVALID_ARGUMENT naming the field
// under `field`: "messages[2].role must be one of system, user, assistant, tool, developer, got
// \"robot\"".
//
// Thread-safety: a pure function.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

inline constexpr int kMaxToolCallNesting = 32;

struct ChatMessageOptions {
  // Keep role "developer" as given (for a template that names it) instead of "system".
  bool keep_developer_role = false;
  // Tool calls' arguments as JSON text instead of the value (ChatTemplate::arguments_as_text).
  bool arguments_as_text = false;
};

absl::StatusOr<Value> ParseChatMessages(const nlohmann::json& messages,
                                        absl::string_view field = "messages",
                                        const ChatMessageOptions& options = {});

}  // namespace abcd::chat
