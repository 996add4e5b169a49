// LoadModelConfig and LoadModelDirectoryConfig (model_config.h): a config file, a model directory's
// config, Hugging Face or abcd's own. Kept apart from model_config.cc, whose parsing of config text
// needs no tokenizer (the model_config fuzzer builds it alone), while a Hugging Face directory's
// add_bos may come from its tokenizer.json (engine/tokenizer/hf_tokenizer.h).
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
  // No add_bos_token: a tokenizer.json's post-processor says (engine/tokenizer/hf_tokenizer.h).
  if (std::optional<bool> adds = hf::TemplateAddsBos(dir); adds.has_value()) {
    config->add_bos = *adds;
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
