// The tokenizer of a model directory, for abcd-server and abcd-cli, checked against the model's
// config; and the ids the engine prefills for a tokenized prompt. Stateless; thread-safe.
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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& dir,
                                                              const ModelConfig& config);

// The ids a decoder's engine prefills for `prompt`, the ids a request gives it
// (RequestIntake::Prepare): the model's bos first where its tokenizer adds one
// (ModelConfig::add_bos: tokenizer_config.json's add_bos_token, else a tokenizer.json's
// post-processor, else true as SentencePiece Llama tokenizers do) or where `prompt` is empty
// (decoding needs a token to start from), then `prompt`. What /tokenize reports, so that its
// ids are those prefilled and, but for an empty prompt of a model without bos, those Hugging
// Face's tokenizer gives with add_special_tokens.
std::vector<int32_t> PrefilledIds(const ModelConfig& config, std::vector<int32_t> prompt);

}  // namespace abcd
