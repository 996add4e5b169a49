#include "server/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "server/chat/jinja_builtins.h"

namespace abcd::chat {

const char kBuiltinChatTemplate[] =
    "{%- for message in messages %}\n"
    "    {{- message['role'] + ': ' + message['content'] | trim + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- 'assistant:' }}\n"
    "{%- endif %}\n";

namespace {

constexpr size_t kMaxTemplateBytes = size_t{1} << 20;
// tokenizer_config.json holds more than the template (added tokens); its template is capped at
// kMaxTemplateBytes like a --chat_template file.
constexpr size_t kMaxTokenizerConfigBytes = size_t{64} << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, bool* exists,
                                          size_t max_bytes = kMaxTemplateBytes) {
  std::ifstream in(path, std::ios::binary);
  *exists = in.good();
  if (!in.good()) return std::string();
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", max_bytes, " bytes"));
  }
  return text;
}

// tokenizer_config.json's bos_token / eos_token: a string or {"content": string}; null: none
// ("", which the template sees as undefined); absent: `fallback`.
std::string SpecialToken(const nlohmann::json& config, const char* key, const char* fallback) {
  if (!config.is_object() || !config.contains(key)) return fallback;
  const nlohmann::json& value = config[key];
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return fallback;
}

// Whether `chat` needs a call's arguments as JSON text (functionary and DeepSeek-V3.1
// concatenate them to strings): a small tool-call conversation with the arguments as a mapping
// fails to render where the same one with text renders. Probed once at load, as llama.cpp probes
// a template's capabilities.
bool NeedsTextArguments(const ChatTemplate& chat) {
  static const nlohmann::json* const kMessages = new nlohmann::json(nlohmann::json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123XYZ", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "abc123XYZ", "content": "18 C"}])"));
  static const Value* const kTools = new Value(FromJson(nlohmann::ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "The weather.",
       "parameters": {"type": "object", "properties": {"city": {"type": "string",
       "description": "A city."}}, "required": ["city"]}}}])")));
  const auto renders = [&](bool as_text) {
    ChatMessageOptions options;
    options.arguments_as_text = as_text;
    absl::StatusOr<Value> messages = ParseChatMessages(*kMessages, "messages", options);
    return messages.ok() && chat.Render(*messages, true, nullptr, *kTools).ok();
  };
  return !renders(false) && renders(true);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromText(absl::string_view text,
                                                                           std::string origin,
                                                                           std::string bos_token,
                                                                           std::string eos_token) {
  absl::StatusOr<JinjaTemplate> jinja = JinjaTemplate::Parse(text);
  if (!jinja.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", jinja.status().message()));
  }
  auto loaded = std::shared_ptr<ChatTemplate>(new ChatTemplate(
      *std::move(jinja), std::move(origin), std::move(bos_token), std::move(eos_token)));
  loaded->tool_call_format_ = DetectToolCallFormat(text);
  loaded->names_developer_ = absl::StrContains(text, "developer");
  loaded->arguments_as_text_ = NeedsTextArguments(*loaded);
  return std::shared_ptr<const ChatTemplate>(std::move(loaded));
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Load(
    const std::string& model_dir, const std::string& override_file,
    std::optional<ToolCallFormat> tool_call_format) {
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> loaded = LoadSource(model_dir, override_file);
  if (!loaded.ok() || !tool_call_format.has_value()) return loaded;
  // A copy (the parsed template is shared, immutable) with the operator's format.
  auto overridden = std::shared_ptr<ChatTemplate>(new ChatTemplate(**loaded));
  overridden->tool_call_format_ = *tool_call_format;
  return std::shared_ptr<const ChatTemplate>(std::move(overridden));
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::LoadSource(
    const std::string& model_dir, const std::string& override_file) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  bool exists = false;
  absl::StatusOr<std::string> config_text =
      ReadSmallFile(config_path, &exists, kMaxTokenizerConfigBytes);
  if (!config_text.ok()) return config_text.status();
  nlohmann::json config = nlohmann::json::object();
  if (exists) {
    if (absl::Status depth = CheckJsonNesting(*config_text, config_path); !depth.ok()) {
      return depth;
    }
    config = nlohmann::json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
    }
  }
  const std::string bos = SpecialToken(config, "bos_token", "<s>");
  const std::string eos = SpecialToken(config, "eos_token", "</s>");
  if (!override_file.empty()) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(override_file, error)) {
      return absl::NotFoundError(
          absl::StrCat("--chat_template ", override_file, ": not found or not a regular file"));
    }
    absl::StatusOr<std::string> text = ReadSmallFile(override_file, &exists);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--chat_template ", text.status().message()));
    }
    if (!exists) {
      return absl::NotFoundError(absl::StrCat("--chat_template ", override_file, ": not readable"));
    }
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> loaded =
        FromText(*text, override_file, bos, eos);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat_template ", loaded.status().message()));
    }
    return loaded;
  }
  if (config.contains("chat_template")) {
    const nlohmann::json& entry = config["chat_template"];
    const nlohmann::json* text = entry.is_string() ? &entry : nullptr;
    if (entry.is_array()) {
      for (const nlohmann::json& named : entry) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          text = &named["template"];
          break;
        }
      }
    }
    if (text != nullptr) {
      const std::string& source = text->get_ref<const std::string&>();
      if (source.size() > kMaxTemplateBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_path, ": chat_template is larger than ", kMaxTemplateBytes, " bytes"));
      }
      absl::StatusOr<std::shared_ptr<const ChatTemplate>> loaded =
          FromText(source, config_path, bos, eos);
      if (loaded.ok()) return loaded;
      // The model still serves completions (transformers, too, only fails apply_chat_template);
      // each chat request gets the parse error.
      auto broken = std::shared_ptr<ChatTemplate>(
          new ChatTemplate(*JinjaTemplate::Parse(""), config_path, bos, eos));
      broken->unusable_ = loaded.status();
      return std::shared_ptr<const ChatTemplate>(std::move(broken));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": chat_template must be a string or a list with a \"default\" entry"));
  }
  return FromText(kBuiltinChatTemplate, "built-in chat template", bos, eos);
}

absl::StatusOr<std::string> ChatTemplate::Render(const Value& messages, bool add_generation_prompt,
                                                 const std::function<bool()>& cancelled,
                                                 const Value& tools) const {
  ValueDict variables = {{"messages", messages},
                         {"tools", tools},
                         {"documents", Value::None()},
                         {"add_generation_prompt", Value::Bool(add_generation_prompt)}};
  // transformers passes only the special tokens a tokenizer has: a null one stays undefined.
  if (!bos_token_.empty()) variables.emplace_back("bos_token", Value::String(bos_token_));
  if (!eos_token_.empty()) variables.emplace_back("eos_token", Value::String(eos_token_));
  if (!unusable_.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages: the model's chat template cannot be used: ", unusable_.message()));
  }
  RenderLimits limits;
  limits.cancelled = cancelled;
  absl::StatusOr<std::string> text = jinja_.Render(variables, limits);
  if (text.ok()) return text;
  const absl::Status& status = text.status();
  if (status.code() == absl::StatusCode::kCancelled) {
    return absl::CancelledError(absl::StrCat("messages: ", status.message()));
  }
  if (status.GetPayload(kTemplateExceptionPayload).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messages: the model's chat template refused the conversation: ", status.message()));
  }
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    return absl::InvalidArgumentError(absl::StrCat("messages: ", status.message()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("messages: the model's chat template (", origin_,
                   ") failed on this conversation: ", status.message()));
}

absl::StatusOr<std::vector<int32_t>> ChatTemplate::EncodePrompt(const Tokenizer& tokenizer,
                                                                absl::string_view text,
                                                                int32_t bos_id,
                                                                int32_t eos_id) const {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t next = absl::string_view::npos;
    int32_t special = -1;
    size_t special_size = 0;
    for (const auto& [token, id] : {std::pair<const std::string&, int32_t>{bos_token_, bos_id},
                                    std::pair<const std::string&, int32_t>{eos_token_, eos_id}}) {
      if (token.empty()) continue;
      const size_t at = text.find(token, pos);
      if (at < next) {
        next = at;
        special = id;
        special_size = token.size();
      }
    }
    const absl::string_view plain =
        text.substr(pos, next == absl::string_view::npos ? next : next - pos);
    if (!plain.empty()) {
      absl::StatusOr<std::vector<int32_t>> piece = tokenizer.Encode(plain);
      if (!piece.ok()) return piece.status();
      ids.insert(ids.end(), piece->begin(), piece->end());
    }
    if (next == absl::string_view::npos) break;
    ids.push_back(special);
    pos = next + special_size;
  }
  if (!ids.empty() && ids.front() == bos_id) ids.erase(ids.begin());  // the engine adds it
  return ids;
}

}  // namespace abcd::chat
