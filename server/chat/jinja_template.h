// A Jinja subset, enough for the chat templates models publish in tokenizer_config.json
// (Llama-2/3/3.1/3.2, Mistral, ChatML/Qwen, Zephyr, Hermes and Command-R tool use, Granite,
// firefunction, gpt-oss style macros), rendered as Hugging Face's apply_chat_template renders
// them: jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), HF's
// tojson, raise_exception and strftime_now.
//
// Supported: text, {{ expr }}, {# comments #}, whitespace control ({%- -%} {{- -}} {%+ %}),
// {% if/elif/else %}, {% for a[, b] in expr [if cond] %} with {% else %}, loop.index/index0/
// revindex/revindex0/first/last/length/previtem/nextitem, {% break %}/{% continue %},
// {% set x = ... %}, {% set x %}...{% endset %}, {% set ns.attr = ... %} on namespace(),
// {% macro m(a, b=default) %} (varargs, kwargs, recursion up to 64 deep) called as m(...) or
// by {% call(args) m(...) %}...{% endcall %} (caller(...)), {% filter f %}...{% endfilter %},
// {% generation %}; literals (strings with Python escapes, ints, floats, true/false/none,
// lists, dicts, tuples), names, .attr, [key], slices [a:b:c], calls, filters, `is [not]` tests,
// not/and/or, comparisons (chained), in / not in, + - * / // % ** ~, `x if c else y`; the
// filters, tests, methods and functions of jinja_builtins.h. Scoping is jinja2's: a {% set %}
// inside a for body lasts one iteration (namespaces carry values out); a macro sees the
// template's top-level variables as they are when it is called, a caller the scope of its
// {% call %}. An undefined value reads as jinja2's lenient Undefined (empty in text, filters
// and loops; an error when its attributes are read).
//
// Parse errors (INVALID_ARGUMENT "chat template line N: ...") are syntax errors and nesting
// deeper than 64. Well-formed constructs outside the subset (include/import/extends, with,
// recursive loops, unknown filters, tests, functions and methods) parse, and fail with
// INVALID_ARGUMENT "chat template line N: ... is not supported" only the renders that reach
// them.
//
// Render is bounded (RenderLimits, jinja_value.h): the output (max_output_bytes), the bytes of
// the strings and lists it creates (max_bytes, charged before each allocation) and the work
// it does (max_work: nodes, expressions, loop iterations, items and bytes touched) are capped,
// so neither a template nor a client's messages can exhaust memory or time; exceeding one is
// RESOURCE_EXHAUSTED "the chat template's render exceeded its ... budget". RenderLimits's
// `cancelled` hook is polled as work is charged: true ends the render with CANCELLED. A
// `{% set ns.x = ns.x + [...] %}` on a namespace appends in place (no copy of the list), so
// collecting items over a long conversation stays linear. Runtime errors (a type error,
// undefined.attr) are INVALID_ARGUMENT with the line; raise_exception(msg) is INVALID_ARGUMENT with
// the template's message and kTemplateExceptionPayload.
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

class JinjaTemplate {
 public:
  static absl::StatusOr<JinjaTemplate> Parse(absl::string_view source);

  // `variables` are the template's globals (messages, bos_token, add_generation_prompt, ...).
  // Runs on the caller's thread; pass limits.cancelled to stop it early.
  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderLimits& limits = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const NodeList> nodes) : nodes_(std::move(nodes)) {}
  std::shared_ptr<const NodeList> nodes_;
};

}  // namespace abcd::chat
