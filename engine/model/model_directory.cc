// LoadModelConfig and LoadModelDirectoryConfig (model_config.h): a config file, a model directory's
// config, Hugging Face or abcd's own. Kept apart from model_config.cc, whose parsing of config text
// needs no tokenizer (the model_config fuzzer builds it alone), while a Hugging Face directory's
// add_bos may come from its tokenizer.json (engine/tokenizer/hf_tokenizer.h), and its bos id
// from tokenizer_config.json's bos_token as tokenizer.json's added tokens number it.
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/model/hf_config.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

using json = nlohmann::json;

// The file's text; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The id of tokenizer_config.json's bos_token (a string, or an AddedToken {"content": ...}) among
// tokenizer.json's added_tokens, where transformers' tokenizer finds its special tokens; nullopt
// without either file, a bos_token (Qwen's is null) or a matching added token. Only added_tokens
// is kept from tokenizer.json (its vocabulary and merges are skipped while parsing).
std::optional<int> TokenizerBosId(const std::string& dir) {
  absl::StatusOr<std::string> text = ReadText(dir + "/tokenizer_config.json");
  if (!text.ok() || !CheckJsonNesting(*text, "tokenizer_config.json").ok()) return std::nullopt;
  const json config = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const json* bos = nullptr;
  if (config.is_object() && config.contains("bos_token")) bos = &config["bos_token"];
  if (bos != nullptr && bos->is_object() && bos->contains("content")) bos = &(*bos)["content"];
  if (bos == nullptr || !bos->is_string()) return std::nullopt;
  text = ReadText(dir + "/tokenizer.json");
  if (!text.ok() || !CheckJsonNesting(*text, "tokenizer.json").ok()) return std::nullopt;
  const json tokenizer = json::parse(
      *text,
      [](int depth, json::parse_event_t event, json& parsed) {
        return !(depth == 1 && event == json::parse_event_t::key && parsed != "added_tokens");
      },
      /*allow_exceptions=*/false);
  if (!tokenizer.is_object() || !tokenizer.contains("added_tokens") ||
      !tokenizer["added_tokens"].is_array()) {
    return std::nullopt;
  }
  for (const json& token : tokenizer["added_tokens"]) {
    if (token.is_object() && token.value("content", json()) == *bos && token.contains("id") &&
        token["id"].is_number_integer() && token["id"].get<int64_t>() >= 0 &&
        token["id"].get<int64_t>() <= INT32_MAX) {
      return static_cast<int>(token["id"].get<int64_t>());
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelDirectoryConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ABCD_ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text, path));
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !IsHfConfig(root)) return LoadModelConfig(path);
  std::string generation, tokenizer;  // both optional
  if (absl::StatusOr<std::string> t = ReadText(dir + "/generation_config.json"); t.ok()) {
    generation = *std::move(t);
  }
  if (absl::StatusOr<std::string> t = ReadText(dir + "/tokenizer_config.json"); t.ok()) {
    tokenizer = *std::move(t);
  }
  absl::StatusOr<ModelConfig> config = ParseHfConfig(root, generation, tokenizer);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(dir, "/", config.status().message()));
  }
  // No add_bos_token in tokenizer_config.json: a tokenizer.json's post-processor says
  // (engine/tokenizer/hf_tokenizer.h); one there, even null, wins over it (ParseHfConfig).
  if (std::optional<bool> adds = hf::TemplateAddsBos(dir); adds.has_value()) {
    config->add_bos = *adds;
  }
  // The bos a prompt starts with is the tokenizer's, as in transformers (config.json's
  // bos_token_id may differ: DeepSeek-R1-Distill-Qwen's is 151643, <|endoftext|>, while its
  // tokenizer adds its begin-of-sentence token, 151646).
  if (std::optional<int> bos = TokenizerBosId(dir); bos.has_value() && *bos < config->vocab_size) {
    config->bos_id = *bos;
  }
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  ABCD_ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace abcd
