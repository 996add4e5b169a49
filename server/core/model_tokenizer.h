// The tokenizer of a model directory, for abcd-server and abcd-cli: `dir`/tokenizer.model
// (SentencePiece), checked against the model's config. Stateless; thread-safe.
//
// Refused, each with one line naming the file:
//   - no tokenizer.model but a tokenizer.json (Hugging Face `tokenizers` format): only the
//     SentencePiece tokenizer.model is supported;
//   - neither file;
//   - a tokenizer with more pieces than the model's vocab_size (ids the embedding lacks).
// A tokenizer with fewer pieces than vocab_size is accepted: Hugging Face models often pad the
// embedding to a multiple of 64 or 128.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& dir,
                                                              const ModelConfig& config);

}  // namespace abcd
