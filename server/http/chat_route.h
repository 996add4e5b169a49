// POST /v1/chat/completions (OpenAI's chat shape) on the completions machinery: the body is
// parsed once, its model resolved once, the messages rendered with the model's chat template
// (server/chat/chat_template.h) and tokenized, and the rest read as a completions request (same
// sampling fields, stop, seed, n, stream, stream_options, limits and errors). The call
// (completion_call.h) writes its bodies and SSE chunks through a ChatWriter, in the chat shape:
//
//   {"id": "chatcmpl-..", "object": "chat.completion", "choices": [{"index", "message":
//    {"role": "assistant", "content"}, "finish_reason", "logprobs": {"content": [{"token",
//    "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]} | null}], "usage"}
//   stream: "chat.completion.chunk" with choices[i].delta ({"role": "assistant", "content": ""}
//   first for each choice, then {"content": piece}; the last has finish_reason).
//
// Chat fields: messages (chat_template.h), max_completion_tokens (or max_tokens; default
// kChatDefaultMaxTokens or the server's limit when lower), logprobs (bool), top_logprobs
// (0..20, needs logprobs), add_generation_prompt (bool, default true; vLLM's extension),
// response_format (ParseResponseFormat, request_parser.h; compiled in the body's key order),
// tools / tool_choice / parallel_tool_calls (chat::ParseToolRequest, chat_tools.h: the template
// gets the tools; with tool_choice other than "none" ChatWriter parses calls in the template's
// format; a named tool_choice, or "required" with one tool, is enforced by constraining the
// output to the call's JSON object, and is a 400 together with response_format).
// session_id as on /v1/completions: "new" renders the conversation and starts a session; with a
// session's id, messages are the NEW messages only, appended after the session's last answer
// (chat::ChatContinuationIds). echo is refused (400). An unknown model is 404 model_not_found.
// POST /tokenize with "messages" renders the same way (PrepareChatPrompt), both through
// chat::ChatPromptIds (server/chat/chat_prompt.h), which gRPC's messages use too.
//
// Thread-safety: PrepareChat is a pure function over the read-only ServedModels; a ChatWriter
// belongs to one call (its connection's strand).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_tools.h"
#include "server/core/served_models.h"
#include "server/http/completion_call.h"
#include "server/http/request_parser.h"

namespace abcd::http {

inline constexpr int kChatDefaultMaxTokens = 256;

// How a chat refusal names the conversation once the template rendered it to token ids (the
// completions parser and the engine call those "prompt" and "prompt_token_ids"), so that the
// error's param is "messages".
inline constexpr absl::string_view kRenderedMessages =
    "messages (as rendered by the chat template)";

// How a chat answer's tool calls are parsed (chat_tools.h): only for a request with tools and
// tool_choice other than "none".
struct ChatToolCalls {
  chat::ToolCallFormat format = chat::ToolCallFormat::kHermes;
  std::shared_ptr<const std::vector<std::string>> names;  // the request's tools
  bool parallel = true;                                   // false: the first call only
};

// Writes a call's choices in the chat shape. With `tool_calls`, each choice's text is parsed
// for calls: a body's message gets "tool_calls" ([{"id": "call_..", "type": "function",
// "function": {"name", "arguments"}}]), "content" the text outside them (null when only
// whitespace) and finish_reason "tool_calls"; a stream holds back text that could start a call
// and sends the calls with the choice's last chunk as delta.tool_calls ([{"index", "id", "type",
// "function": {"name", "arguments"}}]), or the held text as content when it was not a call.
class ChatWriter final : public ChoiceWriter {
 public:
  ChatWriter(bool stream, bool logprobs, int top_logprobs,
             std::shared_ptr<const ChatToolCalls> tool_calls = nullptr)
      : stream_(stream),
        logprobs_(logprobs),
        top_logprobs_(top_logprobs),
        tool_calls_(std::move(tool_calls)) {}

  absl::string_view Object(bool stream) const override {
    return stream ? "chat.completion.chunk" : "chat.completion";
  }
  absl::string_view IdPrefix() const override { return "chatcmpl-"; }
  nlohmann::json BodyChoice(int index, std::string text, nlohmann::json logprobs,
                            FinishReason reason) override;
  nlohmann::json ChunkChoice(int index, std::string text, nlohmann::json logprobs,
                             const FinishReason* finish) override;

 private:
  // {"content": [{"token", "logprob", "bytes", "top_logprobs"}]} from ChoiceLogprobs' object;
  // null without logprobs.
  nlohmann::json ChatLogprobs(const nlohmann::json& completion) const;
  // The calls in OpenAI's shape (streaming: with "index"), parallel_tool_calls applied.
  nlohmann::json CallsJson(std::vector<chat::ToolCall> calls) const;

  bool stream_;
  bool logprobs_;
  int top_logprobs_;
  std::shared_ptr<const ChatToolCalls> tool_calls_;
  std::vector<bool> role_sent_;                // per choice index (streaming)
  std::vector<chat::ToolCallStream> streams_;  // per choice index (streaming with tool_calls)
};

struct PreparedChat {
  CompletionRequest request;           // generation.prompt_token_ids: the rendered conversation
  const ServedModel* model = nullptr;  // resolved once, from the body's "model"
  std::unique_ptr<ChatWriter> writer;  // how the call writes its answer
};

// `cancelled` (may be null) is polled while the chat template renders: true ends it with
// CANCELLED (the client gone, the server draining). HttpService runs this on its RenderQueue
// (render_queue.h), never on an I/O thread.
absl::StatusOr<PreparedChat> PrepareChat(const ServedModels& models, absl::string_view body,
                                         const ParseLimits& limits,
                                         const std::function<bool()>& cancelled = nullptr);

// A model's rendered conversation as the engine is given it (chat::ChatPromptIds: without the bos
// the engine may put first; PrefilledIds adds it for POST /tokenize with messages). `request` is
// the parsed body ("messages", optional "add_generation_prompt"). `tools` (null: none): the
// template's tools variable.
absl::StatusOr<std::vector<int32_t>> PrepareChatPrompt(
    const ServedModel& model, const nlohmann::json& request,
    const std::function<bool()>& cancelled = nullptr,
    const nlohmann::ordered_json& tools = nullptr);

}  // namespace abcd::http
