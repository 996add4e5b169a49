// The tokenizer of a model directory, for abcd-server and abcd-cli, checked against the model's
// config. Stateless; thread-safe.
//
// Which file: Tokenizer::LoadDirectory's choice (engine/tokenizer/tokenizer.h): `dir`/
// tokenizer.json (Hugging Face `tokenizers` format) when present, as transformers'
// AutoTokenizer picks the fast tokenizer; else `dir`/tokenizer.model (SentencePiece). A
// tokenizer.json this engine cannot read (a Unigram model, an unsupported normalizer, ...)
// falls back to a tokenizer.model beside it, and without one is refused with the field it names.
//
// Refused, each with one line naming the file:
//   - neither file;
//   - a tokenizer.json or tokenizer.model that does not load;
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
