#include "server/http/http_errors.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "server/core/served_models.h"

namespace abcd::http {
namespace {

// Every field the JSON requests accept; a message that starts with one of them names it.
constexpr absl::string_view kRequestFields[] = {"model",
                                                "prompt",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "seed",
                                                "stop",
                                                "stream",
                                                "text",
                                                "texts",
                                                "n",
                                                "best_of",
                                                "ignore_eos",
                                                "session_id",
                                                "state",
                                                "beam_size",
                                                "repetition_penalty",
                                                "logprobs",
                                                "echo",
                                                "stream_options",
                                                "min_p",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "logit_bias",
                                                "tokens",
                                                "add_special_tokens",
                                                "messages",
                                                "response_format",
                                                "speculative",
                                                "top_logprobs",
                                                "max_completion_tokens",
                                                "add_generation_prompt",
                                                "prompt_token_ids",
                                                "tools",
                                                "tool_choice",
                                                "parallel_tool_calls",
                                                "functions",
                                                "function_call",
                                                "modalities",
                                                "audio"};

}  // namespace

ErrorMapping MapStatusCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return {200, "", "ok"};
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return {400, "invalid_request_error", "invalid_argument"};
    case absl::StatusCode::kFailedPrecondition:  // e.g. a session blob of another model
      return {412, "precondition_failed_error", "failed_precondition"};
    case absl::StatusCode::kNotFound:
      return {404, "not_found_error", "not_found"};
    case absl::StatusCode::kAborted:  // a session in use by another request
      return {409, "conflict_error", "aborted"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "overloaded_error", "resource_exhausted"};
    case absl::StatusCode::kUnavailable:
      return {503, "unavailable_error", "unavailable"};
    case absl::StatusCode::kCancelled:
      return {503, "cancelled_error", "cancelled"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "timeout_error", "deadline_exceeded"};
    default:
      return {500, "server_error", "internal"};
  }
}

std::string WireMessage(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"sampling.", ""}});
}

std::string ParamFromMessage(absl::string_view message) {
  std::string wire = WireMessage(message);
  size_t end = 0;
  while (end < wire.size() && ((wire[end] >= 'a' && wire[end] <= 'z') || wire[end] == '_')) ++end;
  if (end == wire.size() ||
      (wire[end] != ' ' && wire[end] != '[' && wire[end] != ':' && wire[end] != '.')) {
    return "";
  }
  const absl::string_view word(wire.data(), end);
  bool known = false;
  for (absl::string_view field : kRequestFields) known = known || word == field;
  if (!known) return "";
  // The path continues with "[digits]" and ".key" steps (a key: any run of bytes but
  // whitespace and . [ ] : , " ' ( )); it ends before anything else, e.g. "..." or ". ".
  const auto in_key = [](char c) {
    return !absl::ascii_isspace(static_cast<unsigned char>(c)) &&
           absl::string_view(".[]:,\"'()").find(c) == absl::string_view::npos;
  };
  while (end < wire.size()) {
    size_t next = end + 1;
    if (wire[end] == '[') {
      while (next < wire.size() && absl::ascii_isdigit(static_cast<unsigned char>(wire[next]))) {
        ++next;
      }
      if (next == end + 1 || next == wire.size() || wire[next] != ']') break;
      ++next;
    } else if (wire[end] == '.') {
      while (next < wire.size() && in_key(wire[next])) ++next;
      if (next == end + 1) break;
    } else {
      break;
    }
    end = next;
  }
  return wire.substr(0, end);
}

absl::Status WithParam(absl::Status status, absl::string_view param) {
  if (!status.ok() && ParamFromMessage(status.message()).empty()) {
    status.SetPayload(kParamPayload, absl::Cord(param));
  }
  return status;
}

absl::Status RenameField(const absl::Status& status, absl::string_view from, absl::string_view to) {
  const absl::string_view message = status.message();
  if (status.ok() || !absl::StartsWith(message, from) || message.size() == from.size()) {
    return status;
  }
  const char next = message[from.size()];
  if (next != ' ' && next != '[' && next != ':' && next != '.') return status;
  absl::Status renamed(status.code(), absl::StrCat(to, message.substr(from.size())));
  status.ForEachPayload([&renamed](absl::string_view url, const absl::Cord& payload) {
    renamed.SetPayload(url, payload);
  });
  return renamed;
}

std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view param,
                      absl::string_view code) {
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(type)},
                          {"param", nullptr},
                          {"code", nullptr}};
  if (!param.empty()) error["param"] = std::string(param);
  if (!code.empty()) error["code"] = std::string(code);
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

std::string ErrorBody(const absl::Status& status) {
  const ErrorMapping mapping = MapStatusCode(status.code());
  const std::string code = ErrorCode(status).value_or("");
  if (code == "model_not_found") {  // OpenAI's shape for an unknown model
    return ErrorBody(WireMessage(status.message()), "invalid_request_error", "model", code);
  }
  const auto param = status.GetPayload(kParamPayload);
  return ErrorBody(WireMessage(status.message()), mapping.type,
                   param.has_value() ? std::string(*param) : ParamFromMessage(status.message()),
                   code);
}

}  // namespace abcd::http
