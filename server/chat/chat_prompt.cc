#include "server/chat/chat_prompt.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "server/chat/chat_template.h"

namespace abcd::chat {

namespace {

ChatMessageOptions MessageOptions(const ServedModel& model) {
  ChatMessageOptions options;
  options.keep_developer_role =
      model.chat_template != nullptr && model.chat_template->names_developer();
  options.arguments_as_text =
      model.chat_template != nullptr && model.chat_template->arguments_as_text();
  return options;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ServedModel& model,
                                                   const nlohmann::json& messages,
                                                   bool add_generation_prompt,
                                                   const std::function<bool()>& cancelled,
                                                   const nlohmann::ordered_json& tools) {
  if (model.chat_template == nullptr || model.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has no chat template"));
  }
  ABCD_ASSIGN_OR_RETURN(Value conversation,
                        ParseChatMessages(messages, "messages", MessageOptions(model)));
  ABCD_ASSIGN_OR_RETURN(std::string text, model.chat_template->Render(
                                              conversation, add_generation_prompt, cancelled,
                                              tools.is_null() ? Value::None() : FromJson(tools)));
  ABCD_RETURN_IF_ERROR(model.executor->CheckInput("messages", text.size()));
  const ModelConfig& config = model.executor->backend().config();
  return model.chat_template->EncodePrompt(*model.tokenizer, text, config.bos_id, config.eos_id);
}

absl::StatusOr<std::vector<int32_t>> ChatContinuationIds(const ServedModel& model,
                                                         const nlohmann::json& messages,
                                                         bool add_generation_prompt,
                                                         const std::function<bool()>& cancelled,
                                                         const nlohmann::ordered_json& tools) {
  if (model.chat_template == nullptr || model.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has no chat template"));
  }
  ABCD_RETURN_IF_ERROR(ParseChatMessages(messages, "messages", MessageOptions(model))
                           .status());  // errors name messages[i]
  const std::string kMarker = "AbcdSessionAnswer7f3a";
  nlohmann::json probe = nlohmann::json::array(
      {{{"role", "user"}, {"content", "."}}, {{"role", "assistant"}, {"content", kMarker}}});
  for (const nlohmann::json& message : messages) probe.push_back(message);
  ABCD_ASSIGN_OR_RETURN(Value conversation,
                        ParseChatMessages(probe, "messages", MessageOptions(model)));
  absl::StatusOr<std::string> text =
      model.chat_template->Render(conversation, add_generation_prompt, cancelled,
                                  tools.is_null() ? Value::None() : FromJson(tools));
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat(text.status().message(),
                                                           " (with a session, messages are "
                                                           "the new ones after its last answer)"));
  }
  const size_t at = text->find(kMarker);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "messages: the model's chat template does not render an assistant's content as given, "
        "so a session cannot continue after its answer; send the whole conversation without "
        "session_id");
  }
  const absl::string_view next = absl::string_view(*text).substr(at + kMarker.size());
  ABCD_RETURN_IF_ERROR(model.executor->CheckInput("messages", next.size()));
  const ModelConfig& config = model.executor->backend().config();
  ABCD_ASSIGN_OR_RETURN(
      std::vector<int32_t> ids,
      model.chat_template->EncodePrompt(*model.tokenizer, next, config.bos_id, config.eos_id));
  if (ids.empty()) {
    return absl::InvalidArgumentError("messages: nothing to add to the session");
  }
  return ids;
}

}  // namespace abcd::chat
