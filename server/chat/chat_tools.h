// OpenAI tool calling for chat requests: the request's `tools` / `tool_choice` /
// `parallel_tool_calls` validated, and the tool calls parsed back out of the model's text in the
// format the model's chat template teaches.
//
// Formats (DetectToolCallFormat picks one from the template's source; the server's
// --tool_call_format overrides it, ParseToolCallFormat):
// - kHermes (Hermes, Qwen2/2.5; the template mentions "<tool_call>"): one or more
//   "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>" blocks; the text outside the
//   blocks is content. Also the default for a template that names no format.
// - kMistral (the template mentions "[TOOL_CALLS]"): "[TOOL_CALLS][{"name", "arguments"}, ...]";
//   the text before the marker is content.
// - kLlama3Json (the template mentions "<|python_tag|>"): the whole output, optionally after
//   "<|python_tag|>", is {"name": ..., "parameters": {...}} ("arguments" accepted too).
// - kForced (tool_choice "required" or a named function; the output is constrained to
//   {"name": <const>, "arguments": <the function's parameters>}, with "required" over several
//   tools to one of them): the whole output is that object.
// A call counts only when its name is one of the request's tools and its arguments are a JSON
// object (or a string holding one); output that does not parse as calls is content, unchanged.
//
// Thread-safety: pure functions; ToolCallStream is a value owned by one response choice.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace abcd::chat {

enum class ToolCallFormat { kHermes, kMistral, kLlama3Json, kForced };

ToolCallFormat DetectToolCallFormat(absl::string_view template_source);

// The server's --tool_call_format value: "auto" (nullopt: the format the template teaches,
// DetectToolCallFormat), "hermes", "llama3_json" or "mistral". Anything else is
// INVALID_ARGUMENT naming `flag` and the four names.
absl::StatusOr<std::optional<ToolCallFormat>> ParseToolCallFormat(absl::string_view name,
                                                                  absl::string_view flag);
// "hermes", "mistral", "llama3_json" or "forced".
absl::string_view ToolCallFormatName(ToolCallFormat format);

// A chat request's tool fields. tools: [{"type": "function", "function": {"name": string
// (1..64 of a-z A-Z 0-9 _ -), "description"?: string, "parameters"?: object, "strict"?: bool}}].
// tool_choice: "none" | "auto" (the default with tools) | "required" |
// {"type": "function", "function": {"name": one of the tools}}. parallel_tool_calls: bool
// (default true; false keeps only the first call). Errors are INVALID_ARGUMENT naming the field:
// "tools[1].function.name must be ...", "tool_choice.function.name \"x\" is not one of tools".
struct ToolRequest {
  nlohmann::ordered_json tools = nullptr;  // as given (body order), null when absent or empty
  std::vector<std::string> names;          // tools[i].function.name
  std::string choice = "none";             // "none", "auto", "required" or "function"
  std::string forced_name;                 // choice "function": its name
  int forced_index = -1;                   // choice "function": its index in tools
  bool parallel = true;
  // The forced call's JSON Schema ({"name": const, "arguments": parameters}): for "function"
  // (and "required" with one tool, which becomes it); for "required" with several tools, anyOf
  // one such object per tool (told apart by the name: json_schema_tagged.h), each tool's
  // parameters under "$defs"/abcd_tool_<i> with their references moved along.
  nlohmann::ordered_json forced_schema = nullptr;

  bool parses_calls() const { return choice != "none" && !names.empty(); }
};
// `request` is the parsed body; `ordered` the same body parsed keeping key order (the tools are
// passed to the template, and the parameters compiled, in the order the client wrote them).
absl::StatusOr<ToolRequest> ParseToolRequest(const nlohmann::json& request,
                                             const nlohmann::ordered_json& ordered);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};
struct ParsedToolCalls {
  std::string content;  // the text outside the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};
ParsedToolCalls ParseToolCalls(ToolCallFormat format, absl::string_view text,
                               const std::vector<std::string>& names);

// How many bytes of `text` (a prefix of the output) are surely content: the rest could still
// become a tool call (it starts with, or is a prefix of, the format's marker) and is held back.
size_t SafeContentLength(ToolCallFormat format, absl::string_view text);

// "call_" and 24 random letters and digits.
std::string NewToolCallId();

// One choice's streamed output: Add each piece, send what it returns as content; at the end
// Finish returns the calls and the remaining content (every byte of the output is sent once).
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::shared_ptr<const std::vector<std::string>> names)
      : format_(format), names_(std::move(names)) {}
  std::string Add(absl::string_view piece);
  ParsedToolCalls Finish();

 private:
  ToolCallFormat format_;
  std::shared_ptr<const std::vector<std::string>> names_;
  std::string text_;
  size_t released_ = 0;
};

}  // namespace abcd::chat
