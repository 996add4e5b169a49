// tokenizer.json decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence,
// each Hugging Face's decode_chain over the token strings. Others (WordPiece, BPEDecoder, CTC)
// are refused at load naming the field. Immutable after Parse; thread-safe.
//
// A chain runs in one of two modes: `whole` (a full decoded text, as Hugging Face's decode
// makes it: valid UTF-8, Metaspace dropping the first token's leading replacement, Strip cutting
// the text's ends) or `fragment` (the bytes a few tokens add in the middle of a text, for
// Tokenizer::TokenBytes: byte tokens stay raw bytes even where they are not UTF-8 on their own,
// and nothing is treated as the start or end of the text).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/hf_json.h"

namespace abcd::hf {

struct DecodeState {
  bool fragment = false;
  bool fused = false;  // a Fuse ran: the one token left is the whole text
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const = 0;
};

// `spec` is tokenizer.json's "decoder" (or an element of a Sequence) at `field`; null gives
// nullptr (the tokens are joined with spaces, as Hugging Face does without a decoder).
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& spec, const std::string& field);

}  // namespace abcd::hf
