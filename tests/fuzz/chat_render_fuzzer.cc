// libFuzzer target: attacker-shaped chat `messages` validated (server/chat/chat_messages.h) and
// rendered through fixed templates, as POST /v1/chat/completions and gRPC messages do. The
// templates are the published ones the renderer is checked on against jinja2 (Llama-2/3,
// Mistral v0.1-v0.3, ChatML, Qwen2, Zephyr, the built-in transcript, a feature tour:
// tests/fixtures/chat/templates/), read once at start-up. Input: byte 0 picks the template, byte
// 1's low bit add_generation_prompt, the rest is the request's "messages" JSON value. Byte 0 =
// 0xFF fuzzes the template too: the rest is "<template source>\0<messages JSON>", rendered
// with tighter budgets (kTemplateLimits) so that, run with -timeout and -rss_limit_mb
// (run_fuzzers.sh), any operation whose time or memory escapes the budgets is a finding.
// Checks: a refusal of the messages is INVALID_ARGUMENT naming "messages"; a render either
// succeeds within RenderLimits' output cap or fails with INVALID_ARGUMENT (the template's own
// raise_exception, a runtime error) or RESOURCE_EXHAUSTED (output, memory or work budgets), and
// the same input renders the same way twice.
//
// ABCD_FUZZ_UNBOUNDED_RENDER=1 in the environment (read once at start-up; never set by
// run_fuzzers.sh or CI) raises the output, byte and work budgets of every render to effectively
// unlimited. It exists to show that this target finds the time and memory blow-ups the budgets
// stop (tests/fuzz/README.md, "Runs and findings"): with it, a render that grows or loops past
// -rss_limit_mb or -timeout is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_messages.h"
#include "server/chat/jinja_template.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::vector<abcd::chat::JinjaTemplate>* templates = nullptr;
bool unbounded = false;  // ABCD_FUZZ_UNBOUNDED_RENDER=1

// `limits` with no practical bound on output, bytes or work.
void RemoveBudgets(abcd::chat::RenderLimits& limits) {
  limits.max_output_bytes = SIZE_MAX / 2;
  limits.max_bytes = UINT64_MAX / 2;
  limits.max_work = INT64_MAX / 2;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* switch_value = std::getenv("ABCD_FUZZ_UNBOUNDED_RENDER");
  unbounded = switch_value != nullptr && absl::string_view(switch_value) == "1";
  templates = new std::vector<abcd::chat::JinjaTemplate>();
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(ABCD_CHAT_TEMPLATE_DIR)) {
    if (entry.path().extension() == ".jinja") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const std::filesystem::path& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<abcd::chat::JinjaTemplate> parsed = abcd::chat::JinjaTemplate::Parse(text.str());
    ABCD_FUZZ_CHECK(parsed.ok());
    templates->push_back(*std::move(parsed));
  }
  ABCD_FUZZ_CHECK(templates->size() >= 10);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > (1u << 16)) return 0;
  const bool add_generation_prompt = (data[1] & 1) != 0;
  const char* body = reinterpret_cast<const char*>(data + 2);
  const absl::string_view rest(body, size - 2);
  std::optional<abcd::chat::JinjaTemplate> fuzzed;
  abcd::chat::RenderLimits limits;
  absl::string_view messages_text = rest;
  if (data[0] == 0xFF) {
    const size_t split = rest.find('\0');
    if (split == absl::string_view::npos) return 0;
    absl::StatusOr<abcd::chat::JinjaTemplate> parsed =
        abcd::chat::JinjaTemplate::Parse(rest.substr(0, split));
    if (!parsed.ok()) {
      ABCD_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
      return 0;
    }
    fuzzed = *std::move(parsed);
    messages_text = rest.substr(split + 1);
    // Under ASan a work unit costs a few times more: these keep a render well inside -timeout.
    limits.max_bytes = uint64_t{16} << 20;
    limits.max_work = 500'000;
  }
  if (unbounded) RemoveBudgets(limits);
  const abcd::chat::JinjaTemplate& chosen =
      fuzzed.has_value() ? *fuzzed : (*templates)[data[0] % templates->size()];
  const nlohmann::json json = nlohmann::json::parse(messages_text.begin(), messages_text.end(),
                                                    nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  absl::StatusOr<abcd::chat::Value> messages = abcd::chat::ParseChatMessages(json);
  if (!messages.ok()) {
    ABCD_FUZZ_CHECK(messages.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(absl::StartsWith(messages.status().message(), "messages"));
    return 0;
  }
  // The globals ChatTemplate::Render gives a template (server/chat/chat_template.cc).
  using abcd::chat::Value;
  const abcd::chat::ValueDict variables = {
      {"messages", *messages},
      {"tools", Value::None()},
      {"documents", Value::None()},
      {"add_generation_prompt", Value::Bool(add_generation_prompt)},
      {"bos_token", Value::String("<s>")},
      {"eos_token", Value::String("</s>")}};
  absl::StatusOr<std::string> text = chosen.Render(variables, limits);
  if (text.ok()) {
    ABCD_FUZZ_CHECK(text->size() <= limits.max_output_bytes);
  } else {
    ABCD_FUZZ_CHECK(text.status().code() == absl::StatusCode::kInvalidArgument ||
                    text.status().code() == absl::StatusCode::kResourceExhausted);
  }
  absl::StatusOr<std::string> again = chosen.Render(variables, limits);
  ABCD_FUZZ_CHECK(again.ok() == text.ok());
  ABCD_FUZZ_CHECK(!text.ok() || *again == *text);
  return 0;
}
