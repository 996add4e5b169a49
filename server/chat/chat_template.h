// A served language model's chat template: where it comes from, the conversation it accepts,
// and the prompt ids it renders (for POST /v1/chat/completions, /tokenize with messages, and
// gRPC Generate with messages).
//
// Source, first found: the server's --chat_template file for this model (an operator's explicit
// choice), the `chat_template` of the model directory's tokenizer_config.json (a string, or
// HF's list of {"name", "template"}: the one named "default"), else kBuiltinChatTemplate, a plain
// "role: content" transcript ending in "assistant:" for models that ship none (the bundled
// abc-lm was trained on plain English text, not on conversations). bos_token/eos_token come
// from tokenizer_config.json (a string or {"content": ...}; null: none, the template sees them
// undefined as transformers' does), else "<s>"/"</s>". A template is at most 1 MiB from either
// source. A --chat_template file that does not parse fails the load naming the flag, the file
// and the line; a tokenizer_config.json template that does not parse still loads (the model
// serves completions) and every chat render is INVALID_ARGUMENT "messages: the model's chat
// template cannot be used: <file>: chat template line N: ...". Constructs outside the
// renderer's subset parse and fail only the renders that reach them (jinja_template.h).
//
// Messages: ParseChatMessages (chat_messages.h).
//
// EncodePrompt tokenizes the rendered text as Hugging Face tokenizers do: the bos_token and
// eos_token strings become their ids, the text between is encoded; a leading bos is dropped
// because the engine prepends bos to every prompt.
//
// Thread-safety: immutable after Load; Render and EncodePrompt may run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_messages.h"
#include "server/chat/chat_tools.h"
#include "server/chat/jinja_template.h"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

extern const char kBuiltinChatTemplate[];

class ChatTemplate {
 public:
  // `override_file` empty: none given for this model. `tool_call_format`: the server's
  // --tool_call_format for this model (nullopt, "auto": the one the template's source teaches).
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Load(
      const std::string& model_dir, const std::string& override_file,
      std::optional<ToolCallFormat> tool_call_format = std::nullopt);
  // From template text; `origin` names it in errors ("tokenizer_config.json", a path).
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromText(absl::string_view text,
                                                                      std::string origin,
                                                                      std::string bos_token,
                                                                      std::string eos_token);

  // messages: ParseChatMessages's result. A template's raise_exception is INVALID_ARGUMENT
  // "messages: the model's chat template refused the conversation: <its message>"; a render over
  // its budget (RenderLimits' defaults) INVALID_ARGUMENT "messages: the chat template's render
  // exceeded its work budget ..." (or memory budget, or output size). `cancelled` (may be null)
  // is polled during the render, on this thread; when it returns true the render stops with
  // CANCELLED "messages: the chat template's render was cancelled".
  // `tools`: the template's `tools` variable (the request's tool list; None without tools).
  absl::StatusOr<std::string> Render(const Value& messages, bool add_generation_prompt,
                                     const std::function<bool()>& cancelled = nullptr,
                                     const Value& tools = Value::None()) const;

  absl::StatusOr<std::vector<int32_t>> EncodePrompt(const Tokenizer& tokenizer,
                                                    absl::string_view text, int32_t bos_id,
                                                    int32_t eos_id) const;

  const std::string& origin() const { return origin_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The tool-call format the template's source teaches (chat_tools.h), or Load's override.
  ToolCallFormat tool_call_format() const { return tool_call_format_; }
  // Whether the source mentions "developer" (a template that handles that role itself, as
  // gpt-oss's does); otherwise a developer message reaches it as "system" (chat_messages.h).
  bool names_developer() const { return names_developer_; }
  // Whether the template needs tool calls' arguments as JSON text rather than the mapping most
  // templates expect (chat_messages.h): probed at load with a one-call conversation that
  // renders only with text (functionary v3.1/v3.2, DeepSeek-V3.1).
  bool arguments_as_text() const { return arguments_as_text_; }

 private:
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> LoadSource(
      const std::string& model_dir, const std::string& override_file);
  ChatTemplate(const ChatTemplate&) = default;
  ChatTemplate(JinjaTemplate jinja, std::string origin, std::string bos, std::string eos)
      : jinja_(std::move(jinja)),
        origin_(std::move(origin)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)) {}

  JinjaTemplate jinja_;
  absl::Status unusable_;  // a tokenizer_config.json template that does not parse
  std::string origin_;
  std::string bos_token_;
  std::string eos_token_;
  ToolCallFormat tool_call_format_ = ToolCallFormat::kHermes;
  bool names_developer_ = false;
  bool arguments_as_text_ = false;
};

}  // namespace abcd::chat
