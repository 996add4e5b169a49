#include "server/chat/chat_messages.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"

namespace abcd::chat {
namespace {

// A client's JSON value as the template's value, refusing nesting past `depth_left` levels.
absl::StatusOr<Value> BoundedValue(const nlohmann::json& json, const std::string& name,
                                   int depth_left) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value::Int(json.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::object:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(name, " must be JSON text"));
  }
  if (depth_left <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is nested deeper than ", kMaxToolCallNesting, " levels"));
  }
  if (json.is_array()) {
    ValueList items;
    for (size_t i = 0; i < json.size(); ++i) {
      absl::StatusOr<Value> item =
          BoundedValue(json[i], absl::StrCat(name, "[", i, "]"), depth_left - 1);
      if (!item.ok()) return item.status();
      items.push_back(*std::move(item));
    }
    return Value::List(std::move(items));
  }
  ValueDict items;
  for (const auto& [key, value] : json.items()) {
    absl::StatusOr<Value> item =
        BoundedValue(value, absl::StrCat(name, ".", key.substr(0, 64)), depth_left - 1);
    if (!item.ok()) return item.status();
    items.emplace_back(key, *std::move(item));
  }
  return Value::Dict(std::move(items));
}

absl::StatusOr<std::string> ContentText(const nlohmann::json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".content must be a string or an array of text parts"));
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const nlohmann::json& part = content[j];
    const std::string part_name = absl::StrCat(name, ".content[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(part_name, " must be an object with a \"type\""));
    }
    if (part["type"] != "text") {
      return absl::InvalidArgumentError(
          absl::StrCat(part_name, ".type must be \"text\" (this server takes text only), got \"",
                       part["type"].get<std::string>().substr(0, 64), "\""));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(part_name, ".text must be a string"));
    }
    if (j > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

// A call's arguments as the template sees them (chat_messages.h): JSON text -> its value, or
// with `as_text` a value -> JSON text. `arguments` was made by BoundedValue.
absl::StatusOr<Value> CallArguments(const Value& arguments, bool as_text, const std::string& name) {
  if (arguments.kind == Value::Kind::kNone || (arguments.is_string() && arguments.s.empty())) {
    return as_text ? Value::String("{}") : Value::Dict({});
  }
  if (arguments.is_string()) {
    if (as_text) return arguments;
    const std::string& text = arguments.s.str();
    if (absl::Status s = CheckJsonNesting(text, "", kMaxToolCallNesting); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is nested deeper than ", kMaxToolCallNesting, " levels"));
    }
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be JSON text (the call's arguments as a JSON string)"));
    }
    return BoundedValue(value, name, kMaxToolCallNesting);
  }
  if (!as_text) return arguments;
  absl::StatusOr<std::string> text = ToJson(arguments, /*indent=*/-1);
  if (!text.ok()) return text.status();
  return Value::String(*std::move(text));
}

// Checks each call in `calls` (a fresh BoundedValue) and rewrites its function.arguments for the
// template: a call is an object whose "function" is an object with a string "name" (and an
// "id", when given, is a string), as OpenAI's schema has them and templates read them.
absl::Status TemplateToolCalls(Value& calls, bool as_text, const std::string& name) {
  for (size_t j = 0; j < calls.list->size(); ++j) {
    Value& call = (*calls.list)[j];
    const std::string call_name = absl::StrCat(name, ".tool_calls[", j, "]");
    if (call.kind != Value::Kind::kDict) {
      return absl::InvalidArgumentError(
          absl::StrCat(call_name, " must be an object {\"id\", \"type\", \"function\"}"));
    }
    if (const Value* id = call.Find("id");
        id != nullptr && id->kind != Value::Kind::kNone && !id->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(call_name, ".id must be a string"));
    }
    Value* function = const_cast<Value*>(call.Find("function"));
    if (function == nullptr || function->kind != Value::Kind::kDict) {
      return absl::InvalidArgumentError(
          absl::StrCat(call_name, ".function must be an object {\"name\", \"arguments\"}"));
    }
    if (const Value* function_name = function->Find("name");
        function_name == nullptr || !function_name->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(call_name, ".function.name must be a string"));
    }
    Value* arguments = const_cast<Value*>(function->Find("arguments"));
    if (arguments == nullptr) continue;
    absl::StatusOr<Value> converted =
        CallArguments(*arguments, as_text, absl::StrCat(call_name, ".function.arguments"));
    if (!converted.ok()) return converted.status();
    *arguments = *std::move(converted);
  }
  return absl::OkStatus();
}

// An optional string field of message `m` into `out` (absent or null: left out).
absl::Status CopyString(const nlohmann::json& m, const char* key, const std::string& name,
                        ValueDict& out) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".", key, " must be a string"));
  }
  out.emplace_back(key, Value::String(it->get<std::string>()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Value> ParseChatMessages(const nlohmann::json& messages, absl::string_view field,
                                        const ChatMessageOptions& options) {
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
    std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".role must be one of system, user, assistant, tool, developer, got \"",
          r.substr(0, 64), "\""));
    }
    if (r == "developer" && !options.keep_developer_role) r = "system";
    const auto tool_calls = m.find("tool_calls");
    const bool has_tool_calls = tool_calls != m.end() && !tool_calls->is_null();
    if (has_tool_calls && r != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".tool_calls is allowed on assistant messages only"));
    }
    // Built by emplace_back from empty: GCC 12 at -O3 reports a false -Warray-bounds on growing a
    // vector made from a one-element initializer list here.
    ValueDict message;
    message.reserve(4);
    message.emplace_back("role", Value::String(r));
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (!has_tool_calls) {
        return absl::InvalidArgumentError(absl::StrCat(name, ".content is required"));
      }
      message.emplace_back("content", Value::String(""));
    } else {
      absl::StatusOr<std::string> text = ContentText(*content, name);
      if (!text.ok()) return text.status();
      message.emplace_back("content", Value::String(*std::move(text)));
    }
    if (has_tool_calls) {
      if (!tool_calls->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ".tool_calls must be an array"));
      }
      absl::StatusOr<Value> calls =
          BoundedValue(*tool_calls, absl::StrCat(name, ".tool_calls"), kMaxToolCallNesting);
      if (!calls.ok()) return calls.status();
      if (absl::Status s = TemplateToolCalls(*calls, options.arguments_as_text, name); !s.ok()) {
        return s;
      }
      // An empty list is left out, as vLLM does: the template takes its plain-answer path.
      if (!calls->list->empty()) message.emplace_back("tool_calls", *std::move(calls));
    }
    if (absl::Status s = CopyString(m, "name", name, message); !s.ok()) return s;
    if (r == "tool") {
      // OpenAI requires it: the id of the call this message answers.
      if (const auto id = m.find("tool_call_id"); id == m.end() || id->is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ".tool_call_id is required on tool messages (the id of the call answered)"));
      }
      if (absl::Status s = CopyString(m, "tool_call_id", name, message); !s.ok()) return s;
    }
    out.push_back(Value::Dict(std::move(message)));
  }
  return Value::List(std::move(out));
}

}  // namespace abcd::chat
