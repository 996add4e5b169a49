#include "server/http/chat_route.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/sampling/logprobs.h"
#include "engine/scheduler/executor.h"
#include "server/chat/chat_prompt.h"
#include "server/chat/chat_template.h"
#include "server/http/http_errors.h"
#include "server/http/json_error.h"

namespace abcd::http {
namespace {

using nlohmann::json;

// The body, parsed once in its key order (response_format's schema and the tools keep it).
absl::StatusOr<nlohmann::ordered_json> ParseBody(absl::string_view body) {
  if (absl::Status depth = CheckJsonNesting(body, ""); !depth.ok()) return depth;
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr,
                                                                /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidJsonError(body);
  if (!parsed.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  return parsed;
}

bool Blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); });
}

absl::StatusOr<bool> OptionalBool(const json& o, const char* key, bool fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return absl::InvalidArgumentError(absl::StrCat(key, " must be a boolean"));
  return it->get<bool>();
}

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

}  // namespace

json ChatWriter::ChatLogprobs(const json& completion) const {
  if (!completion.is_object()) return nullptr;
  json content = json::array();
  const json& tokens = completion["tokens"];
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string token = tokens[k].get<std::string>();
    json top = json::array();
    if (top_logprobs_ > 0 && k < completion["top_logprobs"].size()) {
      std::vector<std::pair<std::string, double>> ranked;
      for (const auto& [text, logprob] : completion["top_logprobs"][k].items()) {
        ranked.emplace_back(text, logprob.get<double>());
      }
      std::stable_sort(ranked.begin(), ranked.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
      if (ranked.size() > static_cast<size_t>(top_logprobs_)) ranked.resize(top_logprobs_);
      for (const auto& [text, logprob] : ranked) {
        top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", Bytes(text)}});
      }
    }
    content.push_back({{"token", token},
                       {"logprob", completion["token_logprobs"][k]},
                       {"bytes", Bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json ChatWriter::CallsJson(std::vector<chat::ToolCall> calls) const {
  if (!tool_calls_->parallel && calls.size() > 1) calls.resize(1);
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", chat::NewToolCallId()},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream_) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

json ChatWriter::BodyChoice(int index, std::string text, json logprobs, FinishReason reason) {
  json calls;  // null: none
  if (tool_calls_ != nullptr) {
    chat::ParsedToolCalls parsed =
        chat::ParseToolCalls(tool_calls_->format, text, *tool_calls_->names);
    if (!parsed.calls.empty()) {
      calls = CallsJson(std::move(parsed.calls));
      text = std::move(parsed.content);
    }
  }
  json finish_reason = OpenAiFinishReason(reason);
  json message = {{"role", "assistant"}};
  if (calls.is_null()) {
    message["content"] = std::move(text);
  } else {
    finish_reason = "tool_calls";
    message["content"] = Blank(text) ? json(nullptr) : json(std::move(text));
    message["tool_calls"] = std::move(calls);
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"finish_reason", std::move(finish_reason)},
          {"logprobs", logprobs_ ? ChatLogprobs(logprobs) : json(nullptr)},
          {"abcd", {{"finish_reason", FinishReasonName(reason)}}}};
}

json ChatWriter::ChunkChoice(int index, std::string text, json logprobs,
                             const FinishReason* finish) {
  const size_t i = static_cast<size_t>(index);
  json calls;  // null: none
  if (tool_calls_ != nullptr) {
    while (streams_.size() <= i) streams_.emplace_back(tool_calls_->format, tool_calls_->names);
    text = streams_[i].Add(text);
    if (finish != nullptr) {
      chat::ParsedToolCalls parsed = streams_[i].Finish();
      if (!parsed.calls.empty()) calls = CallsJson(std::move(parsed.calls));
      if (calls.is_null() || !Blank(parsed.content)) text += parsed.content;
    }
  }
  json choice = {{"index", index},
                 {"finish_reason", nullptr},
                 {"logprobs", logprobs_ ? ChatLogprobs(logprobs) : json(nullptr)}};
  if (finish != nullptr) {
    choice["finish_reason"] = calls.is_null() ? json(OpenAiFinishReason(*finish)) : "tool_calls";
    choice["abcd"] = {{"finish_reason", FinishReasonName(*finish)}};
  }
  if (role_sent_.size() <= i) role_sent_.resize(i + 1, false);
  json delta = json::object();
  if (!role_sent_[i]) {
    role_sent_[i] = true;
    delta["role"] = "assistant";
    delta["content"] = std::move(text);
  } else if (!text.empty()) {
    delta["content"] = std::move(text);
  }
  if (!calls.is_null()) delta["tool_calls"] = std::move(calls);
  choice["delta"] = std::move(delta);
  return choice;
}

namespace {

// Refusal before the template runs (issue 44): every message renders at least one token in any
// published template, so each counts kMaxInputBytesPerToken bytes plus its content's, against
// the model's prompt limit. A 14,000-message conversation is refused here, unrendered.
absl::Status CheckMessagesSize(const ServedModel& model, const json& messages) {
  if (!messages.is_array()) return absl::OkStatus();  // ParseChatMessages names the error
  size_t bytes = 0;
  for (const json& m : messages) {
    bytes += kMaxInputBytesPerToken;
    const json* content = m.is_object() && m.contains("content") ? &m["content"] : nullptr;
    if (content == nullptr) continue;
    if (content->is_string()) {
      bytes += content->get_ref<const std::string&>().size();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          bytes += part["text"].get_ref<const std::string&>().size();
        }
      }
    }
  }
  absl::Status status = model.executor->CheckInput("messages", bytes);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      status.message(), " (", messages.size(), " messages, each counted as at least one token",
      " plus its content, before the chat template runs)"));
}

// Fields of OpenAI's chat API this server does not act on, checked and then dropped (tools,
// tool_choice and parallel_tool_calls are chat::ParseToolRequest's). The deprecated functions
// / function_call are refused naming the field instead of being answered without a call;
// modalities other than text and audio output are refused too. The rest (user, store,
// metadata, service_tier, reasoning_effort, prediction, web_search_options) cannot change the
// answer of this server and are ignored, as vLLM does.
absl::Status CheckUnservedFields(const json& o) {
  for (const char* legacy : {"functions", "function_call"}) {
    const auto it = o.find(legacy);
    if (it == o.end() || it->is_null() || (it->is_array() && it->empty()) || *it == "none") {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        legacy, ": this server does not return function calls (use tools and tool_choice)"));
  }
  if (const auto it = o.find("modalities"); it != o.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != 1 || (*it)[0] != "text") {
      return absl::InvalidArgumentError(
          "modalities must be [\"text\"] (this server writes text only)");
    }
  }
  if (const auto it = o.find("audio"); it != o.end() && !it->is_null()) {
    return absl::InvalidArgumentError("audio: this server writes text only");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedChat> PrepareChat(const ServedModels& models, absl::string_view body,
                                         const ParseLimits& limits,
                                         const std::function<bool()>& cancelled) {
  ABCD_ASSIGN_OR_RETURN(const nlohmann::ordered_json ordered, ParseBody(body));
  json o(ordered);  // the same tree, for lookups by key
  for (const char* refused : {"echo", "prompt"}) {
    if (o.contains(refused) && !o[refused].is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat(refused, " is not supported on /v1/chat/completions (use /v1/completions)"));
    }
  }
  if (o.contains("model") && !o["model"].is_null() && !o["model"].is_string()) {
    return absl::InvalidArgumentError("model must be a string");
  }
  ABCD_RETURN_IF_ERROR(CheckUnservedFields(o));
  const std::string name = o.value("model", json("")).is_string() ? o.value("model", "") : "";
  ABCD_ASSIGN_OR_RETURN(const ServedModel* model, models.Resolve(name, ModelKind::kLanguageModel));
  PreparedChat prepared;
  prepared.model = model;
  ABCD_ASSIGN_OR_RETURN(const bool logprobs, OptionalBool(o, "logprobs", false));
  int top_logprobs = 0;
  if (o.contains("top_logprobs") && !o["top_logprobs"].is_null()) {
    const json& top = o["top_logprobs"];
    if (!top.is_number_integer() || top.get<int64_t>() < 0 ||
        top.get<int64_t>() > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("top_logprobs must be an integer in [0, ", kMaxTopLogprobs, "]"));
    }
    if (!logprobs) return absl::InvalidArgumentError("top_logprobs needs \"logprobs\": true");
    top_logprobs = top.get<int>();
  }
  if (o.contains("max_completion_tokens") && !o["max_completion_tokens"].is_null()) {
    const json& max = o["max_completion_tokens"];
    if (!max.is_number_integer() || max.get<int64_t>() < 1 ||
        max.get<int64_t>() > limits.max_tokens_limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_completion_tokens must be an integer in [1, ", limits.max_tokens_limit, "]"));
    }
    o["max_tokens"] = max;
  } else if (!o.contains("max_tokens") || o["max_tokens"].is_null()) {
    o["max_tokens"] = std::min(kChatDefaultMaxTokens, limits.max_tokens_limit);
  }
  // Compiled in the body's key order, the order properties are generated in.
  ABCD_ASSIGN_OR_RETURN(std::shared_ptr<const JsonGrammar> format, ParseResponseFormat(o, ordered));
  // Tools keep the body's order too: the template lists them, and a forced call's parameters
  // are generated, in the order the client wrote them.
  const nlohmann::ordered_json no_tools;
  const bool has_tools = o.contains("tools") || o.contains("tool_choice");
  ABCD_ASSIGN_OR_RETURN(const chat::ToolRequest tools,
                        chat::ParseToolRequest(o, has_tools ? ordered : no_tools));
  std::shared_ptr<const ChatToolCalls> tool_calls;
  if (tools.parses_calls() && model->chat_template != nullptr) {
    auto calls = std::make_shared<ChatToolCalls>();
    calls->format = model->chat_template->tool_call_format();
    calls->names = std::make_shared<const std::vector<std::string>>(tools.names);
    calls->parallel = tools.parallel;
    if (!tools.forced_schema.is_null()) {
      if (format != nullptr) {
        return absl::InvalidArgumentError(
            "response_format cannot be combined with tool_choice \"required\" or a named "
            "function (the call's arguments are already constrained to its parameters)");
      }
      // Each enforced tool's parameters compile on their own first, so a refusal names them.
      for (size_t i = 0; i < tools.names.size(); ++i) {
        if (tools.forced_index >= 0 && i != static_cast<size_t>(tools.forced_index)) continue;
        const nlohmann::ordered_json& function = tools.tools[i]["function"];
        if (const auto p = function.find("parameters"); p != function.end()) {
          ABCD_RETURN_IF_ERROR(
              JsonGrammar::FromSchema(*p, absl::StrCat("tools[", i, "].function.parameters"))
                  .status());
        }
      }
      ABCD_ASSIGN_OR_RETURN(format, JsonGrammar::FromSchema(tools.forced_schema, "tool_choice"));
      calls->format = chat::ToolCallFormat::kForced;
    }
    tool_calls = std::move(calls);
  }
  o.erase("response_format");
  // A session's next turn: its messages are the new ones, appended after the last answer.
  const auto session = o.find("session_id");
  const bool continues = session != o.end() && session->is_string() && *session != "new";
  std::vector<int32_t> ids;
  if (continues) {
    const auto messages = o.find("messages");
    if (messages == o.end()) return absl::InvalidArgumentError("messages is required");
    ABCD_ASSIGN_OR_RETURN(const bool add_generation_prompt,
                          OptionalBool(o, "add_generation_prompt", true));
    ABCD_RETURN_IF_ERROR(CheckMessagesSize(*model, *messages));
    ABCD_ASSIGN_OR_RETURN(ids, chat::ChatContinuationIds(*model, *messages, add_generation_prompt,
                                                         cancelled, tools.tools));
  } else {
    ABCD_ASSIGN_OR_RETURN(ids, PrepareChatPrompt(*model, o, cancelled, tools.tools));
  }
  o["prompt"] = std::move(ids);
  for (const char* chat_only :
       {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "add_generation_prompt",
        "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "modalities",
        "audio"}) {
    o.erase(chat_only);
  }
  if (logprobs) o["logprobs"] = top_logprobs;
  o["model"] = model->name;
  absl::StatusOr<CompletionRequest> request = ParseCompletionRequest(o, ordered, limits);
  if (!request.ok()) return RenameField(request.status(), "prompt", kRenderedMessages);
  prepared.request = *std::move(request);
  prepared.request.generation.response_format = std::move(format);
  prepared.writer = std::make_unique<ChatWriter>(prepared.request.stream, logprobs, top_logprobs,
                                                 std::move(tool_calls));
  return prepared;
}

absl::StatusOr<std::vector<int32_t>> PrepareChatPrompt(const ServedModel& model,
                                                       const json& request,
                                                       const std::function<bool()>& cancelled,
                                                       const nlohmann::ordered_json& tools) {
  const auto messages = request.find("messages");
  if (messages == request.end()) return absl::InvalidArgumentError("messages is required");
  ABCD_ASSIGN_OR_RETURN(const bool add_generation_prompt,
                        OptionalBool(request, "add_generation_prompt", true));
  ABCD_RETURN_IF_ERROR(CheckMessagesSize(model, *messages));
  return chat::ChatPromptIds(model, *messages, add_generation_prompt, cancelled, tools);
}

}  // namespace abcd::http
