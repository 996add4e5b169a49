// A Jinja subset, enough for the chat templates models publish in tokenizer_config.json
// (Llama-2, Llama-3, Mistral instruct v0.1-v0.3 including its tool calls, ChatML/Qwen, Zephyr),
// rendered as Hugging Face's apply_chat_template renders them: jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), HF's tojson.
//
// Supported: text, {{ expr }}, {# comments #}, whitespace control ({%- -%} {{- -}} {%+ %}),
// {% if/elif/else %}, {% for a[, b] in expr [if cond] %} with {% else %}, loop.index/index0/
// revindex/revindex0/first/last/length/previtem/nextitem, {% break %}/{% continue %},
// {% set x = ... %}, {% set ns.attr = ... %} on namespace(), {% generation %}; literals
// (strings with Python escapes, ints, floats, true/false/none, lists, dicts, tuples), names,
// .attr, [key], slices [a:b:c], calls, filters, `is [not]` tests, not/and/or, comparisons
// (chained), in / not in, + - * / // % ** ~, `x if c else y`; the filters, tests, methods and
// functions of jinja_builtins.h. Scoping is jinja2's: a {% set %} inside a for body lasts one
// iteration (namespaces carry values out).
//
// Refused when parsed, with "chat template line N: ..." naming the construct: macros, call
// blocks, {% set %} blocks, include/import/extends, raw, recursive loops, unknown filters,
// tests, functions and methods, syntax errors, nesting deeper than 64.
//
// Render is bounded: the output (RenderLimits::max_output_bytes), the work done (max_steps:
// nodes, loop iterations and expressions evaluated) and range() sizes are capped, so a
// template looping over a client's messages cannot exhaust memory or time; exceeding one is
// RESOURCE_EXHAUSTED. Runtime errors (a type error, undefined.attr) are INVALID_ARGUMENT with
// the line; raise_exception(msg) is INVALID_ARGUMENT with the template's message and
// kTemplateExceptionPayload.
//
// Thread-safety: a parsed template is immutable; Render may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja_ast.h"
#include "server/chat/jinja_value.h"

namespace abcd::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{4} << 20;
  int64_t max_steps = 2'000'000;
};

class JinjaTemplate {
 public:
  static absl::StatusOr<JinjaTemplate> Parse(absl::string_view source);

  // `variables` are the template's globals (messages, bos_token, add_generation_prompt, ...).
  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderLimits& limits = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const NodeList> nodes) : nodes_(std::move(nodes)) {}
  std::shared_ptr<const NodeList> nodes_;
};

}  // namespace abcd::chat
