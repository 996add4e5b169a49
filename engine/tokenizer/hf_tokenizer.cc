#include "engine/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_added_tokens.h"
#include "engine/tokenizer/hf_bpe.h"
#include "engine/tokenizer/hf_decoders.h"
#include "engine/tokenizer/hf_json.h"
#include "engine/tokenizer/hf_normalizers.h"
#include "engine/tokenizer/hf_pre_tokenizers.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

// [token, id] of BertProcessing / RobertaProcessing.
absl::StatusOr<int32_t> TokenIdPair(const json& spec, const std::string& field, const char* key) {
  const json* pair = Member(spec, key);
  if (pair == nullptr || !pair->is_array() || pair->size() != 2 ||
      !(*pair)[1].is_number_integer()) {
    return FieldError(Sub(field, key), "must be [token, id]");
  }
  return (*pair)[1].get<int32_t>();
}

// The special-token ids a post-processor puts before and after a single sequence.
absl::Status ParsePostProcessor(const json& spec, const std::string& field,
                                std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (spec.is_null()) return absl::OkStatus();
  if (!spec.is_object()) return FieldError(field, "must be an object or null");
  const std::string type = TypeName(spec);
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    const json* list = Member(spec, "processors");
    if (list == nullptr || !list->is_array()) {
      return FieldError(Sub(field, "processors"), "must be an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      std::vector<int32_t> p, s;
      ABCD_RETURN_IF_ERROR(
          ParsePostProcessor((*list)[i], absl::StrCat(field, ".processors[", i, "]"), p, s));
      prefix.insert(prefix.begin(), p.begin(), p.end());
      suffix.insert(suffix.end(), s.begin(), s.end());
    }
    return absl::OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    ABCD_ASSIGN_OR_RETURN(const int32_t cls, TokenIdPair(spec, field, "cls"));
    ABCD_ASSIGN_OR_RETURN(const int32_t sep, TokenIdPair(spec, field, "sep"));
    prefix.push_back(cls);
    suffix.push_back(sep);
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return FieldError(Sub(field, "type"),
                      absl::StrCat("\"", type,
                                   "\" is not supported (supported: TemplateProcessing, "
                                   "ByteLevel, BertProcessing, RobertaProcessing, Sequence)"));
  }
  const json* single = Member(spec, "single");
  const json* specials = Member(spec, "special_tokens");
  if (single == nullptr || !single->is_array()) {
    return FieldError(Sub(field, "single"), "must be an array");
  }
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string name = absl::StrCat(field, ".single[", i, "]");
    if (const json* seq = Member(item, "Sequence"); seq != nullptr) {
      if (seen_sequence || Member(*seq, "id") == nullptr || (*seq)["id"] != "A") {
        return FieldError(name, "a single-sequence template holds sequence A once");
      }
      seen_sequence = true;
      continue;
    }
    const json* special = Member(item, "SpecialToken");
    if (special == nullptr || !Member(*special, "id") || !(*special)["id"].is_string()) {
      return FieldError(name, "must be {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    }
    const std::string id = (*special)["id"].get<std::string>();
    const json* entry = specials == nullptr ? nullptr : Member(*specials, id.c_str());
    const json* ids = entry == nullptr ? nullptr : Member(*entry, "ids");
    if (ids == nullptr || !ids->is_array()) {
      return FieldError(Sub(field, "special_tokens"), absl::StrCat("has no ids for \"", id, "\""));
    }
    for (const json& v : *ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return FieldError(Sub(field, "special_tokens"),
                          absl::StrCat("\"", id, "\": ids must be token ids"));
      }
      (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  if (!seen_sequence)
    return FieldError(Sub(field, "single"), "has no {\"Sequence\": {\"id\": \"A\"}}");
  return absl::OkStatus();
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text, path));
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return root;
}

}  // namespace

std::optional<bool> TemplateAddsBos(const std::string& dir) {
  if (absl::StatusOr<json> config = ReadJson(dir + "/tokenizer_config.json");
      config.ok() && config->contains("add_bos_token")) {
    return std::nullopt;
  }
  absl::StatusOr<json> root = ReadJson(dir + "/tokenizer.json");
  if (!root.ok()) return std::nullopt;
  std::vector<int32_t> prefix, suffix;
  auto it = root->find("post_processor");
  if (it == root->end()) return false;
  if (!ParsePostProcessor(*it, "post_processor", prefix, suffix).ok()) return std::nullopt;
  return !prefix.empty();
}

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer = Parse(buffer.str());
  if (!tokenizer.ok()) {
    absl::string_view message = tokenizer.status().message();
    absl::ConsumePrefix(&message, "tokenizer.json: ");  // `path` names the file
    return absl::Status(tokenizer.status().code(), absl::StrCat(path, ": ", message));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(absl::string_view text) {
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text, "tokenizer.json"));
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a JSON object");
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  const json null;
  const auto part = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? null : *it;
  };
  if (part("model").is_null()) return FieldError("model", "is missing");
  ABCD_ASSIGN_OR_RETURN(t->model_, BpeModel::Parse(part("model"), "model"));
  ABCD_ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(part("normalizer"), "normalizer"));
  ABCD_ASSIGN_OR_RETURN(t->pre_tokenizer_,
                        ParsePreTokenizer(part("pre_tokenizer"), "pre_tokenizer"));
  ABCD_ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(part("decoder"), "decoder"));
  ABCD_ASSIGN_OR_RETURN(t->added_, AddedTokens::Parse(part("added_tokens"), t->normalizer_.get()));
  ABCD_RETURN_IF_ERROR(
      ParsePostProcessor(part("post_processor"), "post_processor", t->prefix_, t->suffix_));
  t->vocab_size_ = t->model_->id_limit();
  const int64_t id_bound =
      2 * static_cast<int64_t>(t->model_->id_limit() + t->added_->tokens().size()) + 65536;
  for (const AddedToken& token : t->added_->tokens()) {
    if (token.id >= id_bound) {
      return FieldError("added_tokens",
                        absl::StrCat("id ", token.id, " of \"", token.content,
                                     "\" is far past the vocab (at most ", id_bound - 1, ")"));
    }
    t->vocab_size_ = std::max(t->vocab_size_, token.id + 1);
    t->has_normalized_added_ |= token.normalized;
  }
  for (const auto* ids : {&t->prefix_, &t->suffix_}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= t->vocab_size_) {
        return FieldError("post_processor", absl::StrCat("token id ", id, " is past the vocab"));
      }
    }
  }
  return t;
}

const std::string* HfTokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_->ById(id); added != nullptr) return &added->pattern;
  return model_->IdToToken(id);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(absl::string_view text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("tokenize: text is not valid UTF-8");
  std::vector<int32_t> ids;
  std::vector<Segment> raw, normalized;
  added_->Split(text, /*normalized=*/false, /*at_start=*/true, raw);
  // Each pre-token goes to the model as the pre-tokenizer finds it, through buffers reused from
  // one to the next: no list of the pre-tokens is held, and the allocations do not grow with
  // their number (hf_pre_tokenizers.h).
  PreTokenizeScratch scratch;
  BpeModel::Scratch merge_scratch;
  const auto to_model = [&](absl::string_view piece, bool) {
    return model_->Tokenize(piece, ids, merge_scratch);
  };
  for (Segment& segment : raw) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    if (normalizer_ != nullptr) ABCD_RETURN_IF_ERROR(normalizer_->Normalize(segment.text));
    normalized.clear();
    if (has_normalized_added_) {
      added_->Split(segment.text, /*normalized=*/true, segment.at_start, normalized);
    } else if (!segment.text.empty()) {
      normalized.push_back(std::move(segment));
    }
    for (Segment& part : normalized) {
      if (part.id >= 0) {
        ids.push_back(part.id);
      } else if (pre_tokenizer_ == nullptr) {
        ABCD_RETURN_IF_ERROR(to_model(part.text, part.at_start));
      } else {
        ABCD_RETURN_IF_ERROR(
            pre_tokenizer_->PreTokenize(part.text, part.at_start, scratch, to_model));
      }
    }
  }
  return ids;
}

absl::StatusOr<std::string> HfTokenizer::Decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
    if (const AddedToken* added = added_->ById(id); added != nullptr) {
      if (!added->special) tokens.push_back(added->pattern);
    } else if (const std::string* token = model_->IdToToken(id); token != nullptr) {
      tokens.push_back(*token);
    }
  }
  if (decoder_ == nullptr) return absl::StrJoin(tokens, " ");
  DecodeState state;
  ABCD_RETURN_IF_ERROR(decoder_->DecodeChain(tokens, state));
  return absl::StrJoin(tokens, "");
}

std::vector<std::string> HfTokenizer::TokenBytes() const {
  std::vector<std::string> bytes(vocab_size_);
  std::vector<std::string> tokens;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const AddedToken* added = added_->ById(id);
    if (added != nullptr && added->special) continue;
    const std::string* token = added != nullptr ? &added->pattern : model_->IdToToken(id);
    if (token == nullptr) continue;
    if (decoder_ == nullptr) {
      bytes[id] = absl::StrCat(" ", *token);
      continue;
    }
    tokens.assign(1, *token);
    DecodeState state;
    state.fragment = true;
    if (decoder_->DecodeChain(tokens, state).ok()) bytes[id] = absl::StrJoin(tokens, "");
  }
  return bytes;
}

}  // namespace abcd::hf
