#include "server/chat/chat_prompt.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "server/chat/chat_template.h"

namespace abcd::chat {

absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const ServedModel& model,
                                                   const nlohmann::json& messages,
                                                   bool add_generation_prompt) {
  if (model.chat_template == nullptr || model.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has no chat template"));
  }
  ABCD_ASSIGN_OR_RETURN(Value conversation, ParseChatMessages(messages));
  ABCD_ASSIGN_OR_RETURN(std::string text,
                        model.chat_template->Render(conversation, add_generation_prompt));
  ABCD_RETURN_IF_ERROR(model.executor->CheckInput("messages", text.size()));
  const ModelConfig& config = model.executor->backend().config();
  ABCD_ASSIGN_OR_RETURN(
      std::vector<int32_t> ids,
      model.chat_template->EncodePrompt(*model.tokenizer, text, config.bos_id, config.eos_id));
  ids.insert(ids.begin(), config.bos_id);
  return ids;
}

}  // namespace abcd::chat
