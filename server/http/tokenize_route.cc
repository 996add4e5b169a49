#include "server/http/tokenize_route.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "server/chat/chat_tools.h"
#include "server/core/model_tokenizer.h"
#include "server/http/chat_route.h"

namespace abcd::http {
namespace {

// The named model whatever its kind (empty: the default language model).
absl::StatusOr<const ServedModel*> ResolveAny(const ServedModels& models, const std::string& name) {
  const ServedModel* named = name.empty() ? nullptr : models.FindByName(name);
  ABCD_ASSIGN_OR_RETURN(
      const ServedModel* model,
      models.Resolve(name, named != nullptr ? named->kind : ModelKind::kLanguageModel));
  if (model->tokenizer == nullptr) {
    return absl::UnavailableError(absl::StrCat("model '", model->name, "' has no tokenizer"));
  }
  return model;
}

}  // namespace

absl::StatusOr<nlohmann::json> AnswerTokenize(const ServedModels& models, absl::string_view body,
                                              int max_model_len,
                                              const std::function<bool()>& cancelled) {
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(body, ""));
  const nlohmann::json parsed =
      nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("messages")) {  // chat: the rendered conversation
    if (parsed.contains("prompt")) {
      return absl::InvalidArgumentError(
          "prompt and messages are mutually exclusive; send one of them");
    }
    const nlohmann::json model_name = parsed.value("model", nlohmann::json(""));
    if (!model_name.is_string()) return absl::InvalidArgumentError("model must be a string");
    ABCD_ASSIGN_OR_RETURN(const ServedModel* model,
                          models.Resolve(model_name.get<std::string>(), ModelKind::kLanguageModel));
    // The tools reach the template as on /v1/chat/completions (validated the same way).
    nlohmann::ordered_json ordered = nullptr;
    if (parsed.contains("tools") || parsed.contains("tool_choice")) {
      ordered = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false);
    }
    ABCD_ASSIGN_OR_RETURN(const chat::ToolRequest tools, chat::ParseToolRequest(parsed, ordered));
    ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          PrepareChatPrompt(*model, parsed, cancelled, tools.tools));
    ids = PrefilledIds(model->executor->backend().config(), std::move(ids));
    const size_t count = ids.size();
    return nlohmann::json{
        {"tokens", std::move(ids)}, {"count", count}, {"max_model_len", max_model_len}};
  }
  ABCD_ASSIGN_OR_RETURN(TokenizeRequest request, ParseTokenizeRequest(body));
  ABCD_ASSIGN_OR_RETURN(const ServedModel* model, ResolveAny(models, request.model));
  const bool translation = model->kind == ModelKind::kTranslation;
  ABCD_RETURN_IF_ERROR(
      model->executor->CheckInput(translation ? "text" : "prompt", request.prompt.size()));
  ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> ids, model->tokenizer->Encode(request.prompt));
  if (request.add_special_tokens) {
    const ModelConfig& config = model->executor->backend().config();
    if (translation) {
      ids.push_back(config.eos_id);
    } else {
      ids = PrefilledIds(config, std::move(ids));
    }
  }
  const size_t count = ids.size();
  return nlohmann::json{
      {"tokens", std::move(ids)}, {"count", count}, {"max_model_len", max_model_len}};
}

absl::StatusOr<nlohmann::json> AnswerDetokenize(const ServedModels& models, absl::string_view body,
                                                const ParseLimits& limits) {
  ABCD_ASSIGN_OR_RETURN(DetokenizeRequest request, ParseDetokenizeRequest(body, limits));
  ABCD_ASSIGN_OR_RETURN(const ServedModel* model, ResolveAny(models, request.model));
  const int vocab = model->tokenizer->vocab_size();
  for (size_t i = 0; i < request.tokens.size(); ++i) {
    if (request.tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens[", i, "] must be in [0, ", vocab, "), got ", request.tokens[i]));
    }
  }
  ABCD_ASSIGN_OR_RETURN(std::string text, model->tokenizer->Decode(request.tokens));
  return nlohmann::json{{"prompt", std::move(text)}};
}

}  // namespace abcd::http
