#include "server/chat/chat_tools.h"

#include <algorithm>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace abcd::chat {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr absl::string_view kHermesOpen = "<tool_call>";
constexpr absl::string_view kHermesClose = "</tool_call>";
constexpr absl::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr absl::string_view kPythonTag = "<|python_tag|>";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// `value` (a tool's parameters, or part of them) with each "$ref": "#..." pointing into
// "#/$defs/<at>..." instead, where the parameters move. Nesting is bounded by the request's
// JSON nesting limit.
void MoveRefs(ordered_json& value, const std::string& at) {
  if (value.is_array()) {
    for (ordered_json& item : value) MoveRefs(item, at);
    return;
  }
  if (!value.is_object()) return;
  for (auto& [key, item] : value.items()) {
    if (key == "$ref" && item.is_string()) {
      const std::string ref = item.get<std::string>();
      if (!ref.empty() && ref[0] == '#') item = absl::StrCat("#/$defs/", at, ref.substr(1));
      continue;
    }
    MoveRefs(item, at);
  }
}

// tool_choice "required" over several tools: anyOf one call per tool, {"name": const, "arguments":
// its parameters}, told apart by the name (a tagged union, json_schema_tagged.h). Each tool's
// parameters move under "$defs" (abcd_tool_<i>, their own $defs inside) with their references.
ordered_json RequiredCallSchema(const ordered_json& tools, const std::vector<std::string>& names) {
  ordered_json defs = ordered_json::object();
  ordered_json calls = ordered_json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    const ordered_json& function = tools[i]["function"];
    ordered_json parameters = ordered_json({{"type", "object"}});
    if (const auto p = function.find("parameters"); p != function.end()) parameters = *p;
    const std::string at = absl::StrCat("abcd_tool_", i);
    MoveRefs(parameters, at);
    defs[at] = std::move(parameters);
    calls.push_back({{"type", "object"},
                     {"properties",
                      {{"name", {{"const", names[i]}}},
                       {"arguments", {{"$ref", absl::StrCat("#/$defs/", at)}}}}},
                     {"required", {"name", "arguments"}},
                     {"additionalProperties", false}});
  }
  return {{"$defs", std::move(defs)}, {"anyOf", std::move(calls)}};
}

// {"name": one of `names`, <arguments_key>: object or a string holding one} -> a call.
bool CallFromJson(const json& value, const std::vector<std::string>& names,
                  std::initializer_list<const char*> argument_keys, ToolCall* call) {
  if (!value.is_object()) return false;
  const auto name = value.find("name");
  if (name == value.end() || !name->is_string()) return false;
  if (std::find(names.begin(), names.end(), name->get<std::string>()) == names.end()) {
    return false;
  }
  const json* arguments = nullptr;
  for (const char* key : argument_keys) {
    if (const auto it = value.find(key); it != value.end()) arguments = &*it;
  }
  if (arguments == nullptr) return false;
  if (arguments->is_string()) {
    const json inner = json::parse(arguments->get<std::string>(), nullptr, false);
    if (!inner.is_object()) return false;
    call->arguments = arguments->get<std::string>();
  } else if (arguments->is_object()) {
    call->arguments = arguments->dump();
  } else {
    return false;
  }
  call->name = name->get<std::string>();
  return true;
}

json ParseJson(absl::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// The first position from which `text` starts with `marker` or is a prefix of it.
size_t MarkerStart(absl::string_view text, absl::string_view marker) {
  for (size_t p = 0; p < text.size(); ++p) {
    const absl::string_view rest = text.substr(p);
    if (rest.size() >= marker.size() ? absl::StartsWith(rest, marker)
                                     : absl::StartsWith(marker, rest)) {
      return p;
    }
  }
  return text.size();
}

ParsedToolCalls ParseHermes(absl::string_view text, const std::vector<std::string>& names) {
  ParsedToolCalls parsed;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == absl::string_view::npos) break;
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const size_t end = close == absl::string_view::npos ? text.size() : close;
    ToolCall call;
    if (!CallFromJson(ParseJson(text.substr(body, end - body)), names, {"arguments"}, &call)) {
      absl::StrAppend(&parsed.content, text.substr(pos, body - pos));
      pos = body;
      continue;
    }
    absl::StrAppend(&parsed.content, text.substr(pos, open - pos));
    parsed.calls.push_back(std::move(call));
    pos = close == absl::string_view::npos ? text.size() : close + kHermesClose.size();
  }
  absl::StrAppend(&parsed.content, text.substr(std::min(pos, text.size())));
  return parsed;
}

ParsedToolCalls ParseMistral(absl::string_view text, const std::vector<std::string>& names) {
  ParsedToolCalls parsed;
  const size_t at = text.find(kMistralMarker);
  if (at != absl::string_view::npos) {
    const json calls = ParseJson(text.substr(at + kMistralMarker.size()));
    const json list = calls.is_object() ? json::array({calls}) : calls;
    if (list.is_array() && !list.empty()) {
      for (const json& item : list) {
        ToolCall call;
        if (!CallFromJson(item, names, {"arguments"}, &call)) {
          parsed.calls.clear();
          break;
        }
        parsed.calls.push_back(std::move(call));
      }
    }
  }
  parsed.content = std::string(parsed.calls.empty() ? text : text.substr(0, at));
  return parsed;
}

// The whole output (after `prefix`, if given) is one call object.
ParsedToolCalls ParseWhole(absl::string_view text, const std::vector<std::string>& names,
                           std::initializer_list<const char*> argument_keys) {
  ParsedToolCalls parsed;
  absl::string_view body = absl::StripLeadingAsciiWhitespace(text);
  if (absl::StartsWith(body, kPythonTag)) body.remove_prefix(kPythonTag.size());
  ToolCall call;
  if (CallFromJson(ParseJson(body), names, argument_keys, &call)) {
    parsed.calls.push_back(std::move(call));
  } else {
    parsed.content = std::string(text);
  }
  return parsed;
}

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

}  // namespace

ToolCallFormat DetectToolCallFormat(absl::string_view template_source) {
  if (absl::StrContains(template_source, kMistralMarker)) return ToolCallFormat::kMistral;
  if (absl::StrContains(template_source, kPythonTag)) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kHermes;
}

absl::StatusOr<std::optional<ToolCallFormat>> ParseToolCallFormat(absl::string_view name,
                                                                  absl::string_view flag) {
  if (name == "auto") return std::nullopt;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " must be auto, hermes, llama3_json or mistral, got \"", name.substr(0, 64), "\""));
}

absl::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kForced:
      return "forced";
  }
  return "hermes";
}

absl::StatusOr<ToolRequest> ParseToolRequest(const json& request, const ordered_json& ordered) {
  ToolRequest out;
  const auto tools = request.find("tools");
  if (tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) return absl::InvalidArgumentError("tools must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string field = absl::StrCat("tools[", i, "]");
      if (!tool.is_object()) return FieldError(field, "must be an object");
      if (tool.value("type", json()) != "function") {
        return FieldError(absl::StrCat(field, ".type"), "must be \"function\"");
      }
      const auto function = tool.find("function");
      if (function == tool.end() || !function->is_object()) {
        return FieldError(absl::StrCat(field, ".function"),
                          "must be an object ({\"name\": ..., \"parameters\": {...}})");
      }
      const json name = function->value("name", json());
      if (!name.is_string() || !ValidName(name.get<std::string>())) {
        return FieldError(absl::StrCat(field, ".function.name"),
                          "must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
      }
      if (std::find(out.names.begin(), out.names.end(), name) != out.names.end()) {
        return FieldError(absl::StrCat(field, ".function.name"),
                          absl::StrCat("\"", name.get<std::string>(), "\" is given twice"));
      }
      if (const auto d = function->find("description"); d != function->end() && !d->is_string()) {
        return FieldError(absl::StrCat(field, ".function.description"), "must be a string");
      }
      if (const auto p = function->find("parameters"); p != function->end() && !p->is_object()) {
        return FieldError(absl::StrCat(field, ".function.parameters"),
                          "must be a JSON Schema object");
      }
      if (const auto s = function->find("strict");
          s != function->end() && !s->is_null() && !s->is_boolean()) {
        return FieldError(absl::StrCat(field, ".function.strict"), "must be a boolean");
      }
      out.names.push_back(name.get<std::string>());
    }
    if (!out.names.empty()) {
      out.tools = ordered["tools"];
      out.choice = "auto";
    }
  }
  if (const auto it = request.find("tool_choice"); it != request.end() && !it->is_null()) {
    std::string choice;
    if (it->is_string() && (*it == "none" || *it == "auto" || *it == "required")) {
      choice = it->get<std::string>();
    } else if (it->is_object() && it->value("type", json()) == "function" &&
               it->contains("function") && (*it)["function"].is_object() &&
               (*it)["function"].value("name", json()).is_string()) {
      choice = "function";
      out.forced_name = (*it)["function"]["name"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}");
    }
    if (choice != "none" && out.names.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool_choice ", choice == "function" ? "a named function" : choice,
                       " needs a non-empty tools array"));
    }
    if (choice == "required" && out.names.size() == 1) {
      choice = "function";
      out.forced_name = out.names[0];
    }
    if (choice == "function" &&
        std::find(out.names.begin(), out.names.end(), out.forced_name) == out.names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice.function.name \"", out.forced_name, "\" is not one of the tools"));
    }
    out.choice = out.names.empty() ? "none" : choice;
  }
  if (const auto it = request.find("parallel_tool_calls"); it != request.end() && !it->is_null()) {
    if (!it->is_boolean())
      return absl::InvalidArgumentError("parallel_tool_calls must be a boolean");
    out.parallel = it->get<bool>();
  }
  if (out.choice == "function") {
    const size_t index =
        std::find(out.names.begin(), out.names.end(), out.forced_name) - out.names.begin();
    out.forced_index = static_cast<int>(index);
    const ordered_json& function = out.tools[index]["function"];
    ordered_json parameters = ordered_json({{"type", "object"}});
    if (const auto p = function.find("parameters"); p != function.end()) parameters = *p;
    ordered_json schema = {{"type", "object"}};
    // $ref "#/$defs/.." points at the document's root: the definitions move up with the call.
    for (const char* defs : {"$defs", "definitions"}) {
      if (parameters.is_object() && parameters.contains(defs)) {
        schema[defs] = parameters[defs];
        parameters.erase(defs);
      }
    }
    schema["properties"] = {{"name", {{"const", out.forced_name}}}, {"arguments", parameters}};
    schema["required"] = {"name", "arguments"};
    schema["additionalProperties"] = false;
    out.forced_schema = std::move(schema);
  } else if (out.choice == "required") {
    out.forced_schema = RequiredCallSchema(out.tools, out.names);
  }
  return out;
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, absl::string_view text,
                               const std::vector<std::string>& names) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text, names);
    case ToolCallFormat::kMistral:
      return ParseMistral(text, names);
    case ToolCallFormat::kLlama3Json:
      return ParseWhole(text, names, {"parameters", "arguments"});
    case ToolCallFormat::kForced:
      return ParseWhole(text, names, {"arguments"});
  }
  return {std::string(text), {}};
}

size_t SafeContentLength(ToolCallFormat format, absl::string_view text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return MarkerStart(text, kHermesOpen);
    case ToolCallFormat::kMistral:
      return MarkerStart(text, kMistralMarker);
    case ToolCallFormat::kLlama3Json: {
      const absl::string_view body = absl::StripLeadingAsciiWhitespace(text);
      if (body.empty() || absl::StartsWith(body, "{") || absl::StartsWith(body, kPythonTag) ||
          absl::StartsWith(kPythonTag, body)) {
        return 0;
      }
      return text.size();
    }
    case ToolCallFormat::kForced:
      return 0;
  }
  return text.size();
}

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(random)];
  return id;
}

std::string ToolCallStream::Add(absl::string_view piece) {
  absl::StrAppend(&text_, piece);
  // Only the held tail is scanned again: a marker cannot start in released text, and a
  // Llama-3.1 JSON output that released anything is content.
  const size_t safe =
      format_ == ToolCallFormat::kLlama3Json && released_ > 0
          ? text_.size()
          : released_ + SafeContentLength(format_, absl::string_view(text_).substr(released_));
  if (safe <= released_) return "";
  std::string out = text_.substr(released_, safe - released_);
  released_ = safe;
  return out;
}

ParsedToolCalls ToolCallStream::Finish() {
  ParsedToolCalls parsed = ParseToolCalls(format_, text_, *names_);
  // The released text is content before any call (a call starts at a held marker).
  const std::string& all = parsed.calls.empty() ? text_ : parsed.content;
  parsed.content = all.substr(std::min(released_, all.size()));
  return parsed;
}

}  // namespace abcd::chat
