// Hugging Face model directories as published: config.json with a `model_type` (llama, mistral,
// qwen2, qwen3, and the fla model zoo's gsa, gla, retnet, hgrn2, gated_deltanet, with or without
// short convolutions), read into the engine's ModelConfig together with generation_config.json
// (eos ids) and tokenizer_config.json (add_bos_token) when present. What the engine does not
// implement (sliding-window hybrid layers, rope scaling other than linear/llama3, ...) is refused
// with an error naming the config key. models/FORMAT.md ("Hugging Face checkpoints") lists the keys
// read.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model_config.h"
#include "nlohmann/json.hpp"

namespace abcd {

// True when a parsed config.json is a Hugging Face one (it has "model_type").
bool IsHfConfig(const nlohmann::json& root);

// config.json of a Hugging Face checkpoint. `generation_config` and `tokenizer_config` are the
// texts of those files, empty when absent. Errors name the file and key.
absl::StatusOr<ModelConfig> ParseHfConfig(const nlohmann::json& root,
                                          absl::string_view generation_config,
                                          absl::string_view tokenizer_config);

// The intermediate size of an fla GatedMLP without `intermediate_size`:
// 256 * ceil(floor(d * hidden_ratio * 2 / 3) / 256).
int FlaIntermediateSize(int hidden_size, double hidden_ratio);

}  // namespace abcd
