#include "server/chat/chat_messages.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace abcd::chat {

absl::StatusOr<Value> ParseChatMessages(const nlohmann::json& messages, absl::string_view field) {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a non-empty array of {\"role\", \"content\"} objects"));
  }
  ValueList out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string name = absl::StrCat(field, "[", i, "]");
    const nlohmann::json& m = messages[i];
    if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(name, " must be an object"));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".role must be a string"));
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".role must be one of system, user, assistant, got \"", r.substr(0, 64), "\""));
    }
    const auto content = m.find("content");
    std::string text;
    if (content == m.end() || content->is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".content is required"));
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const nlohmann::json& part = (*content)[j];
        const std::string part_name = absl::StrCat(name, ".content[", j, "]");
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(part_name, " must be an object with a \"type\""));
        }
        if (part["type"] != "text") {
          return absl::InvalidArgumentError(absl::StrCat(
              part_name, ".type must be \"text\" (this server takes text only), got \"",
              part["type"].get<std::string>().substr(0, 64), "\""));
        }
        if (!part.contains("text") || !part["text"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(part_name, ".text must be a string"));
        }
        if (j > 0) text += "\n";
        text += part["text"].get<std::string>();
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".content must be a string or an array of text parts"));
    }
    out.push_back(Value::Dict({{"role", Value::String(r)}, {"content", Value::String(text)}}));
  }
  return Value::List(std::move(out));
}

}  // namespace abcd::chat
