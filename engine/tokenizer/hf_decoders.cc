#include "engine/tokenizer/hf_decoders.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_normalizers.h"
#include "engine/tokenizer/hf_pre_tokenizers.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    for (const auto& part : parts_) ABCD_RETURN_IF_ERROR(part->DecodeChain(tokens, state));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Each token's characters as the bytes GPT-2's map gives them (a token with a character
// outside the map, such as an added token with a space, as its own UTF-8), all in one token.
class ByteLevelDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      size_t pos = 0;
      bool all = true;
      while (pos < token.size() && all) {
        const int b = UnicodeToByte(NextCodePoint(token, &pos));
        all = b >= 0;
        mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : token;
    }
    tokens.assign(1, state.fragment ? std::move(bytes) : Utf8Lossy(bytes));
    return absl::OkStatus();
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> regex, std::string literal, std::string content)
      : regex_(std::move(regex)), literal_(std::move(literal)), content_(std::move(content)) {}
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState&) const override {
    for (std::string& token : tokens) {
      if (regex_ == nullptr) {
        token = absl::StrReplaceAll(token, {{literal_, content_}});
      } else if (IsValidUtf8(token)) {  // (a fragment's raw bytes may not be)
        ABCD_ASSIGN_OR_RETURN(token, ReplaceAll(*regex_, token, content_));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Regex> regex_;  // null: `literal_` is the pattern
  std::string literal_;
  std::string content_;
};

// Runs of <0xNN> tokens become their bytes: as text where they are UTF-8, else one U+FFFD per
// byte (a fragment keeps the raw bytes).
class ByteFallbackDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (state.fragment || IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (std::string& token : tokens) {
      int value = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        value = 0;
        for (int i = 3; i < 5 && value >= 0; ++i) {
          const char c = token[i];
          const int digit = c >= '0' && c <= '9'   ? c - '0'
                            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                   : -1;
          value = digit < 0 ? -1 : value * 16 + digit;
        }
      }
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
    return absl::OkStatus();
  }
};

class FuseDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    tokens.assign(1, absl::StrJoin(tokens, ""));
    state.fused = true;
    return absl::OkStatus();
  }
};

// Cuts up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    if (state.fragment && state.fused) return absl::OkStatus();  // the text's ends are elsewhere
    for (std::string& token : tokens) {
      std::vector<size_t> starts;  // byte offset of each character
      size_t pos = 0;
      std::vector<char32_t> chars;
      while (pos < token.size()) {
        starts.push_back(pos);
        chars.push_back(NextCodePoint(token, &pos));
      }
      starts.push_back(token.size());
      size_t begin = 0;
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i] == content_; ++i) begin = i + 1;
      size_t end = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        end = index;
      }
      token = end > begin ? token.substr(starts[begin], starts[end] - starts[begin]) : "";
    }
    return absl::OkStatus();
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(MetaspaceSpec spec) : spec_(std::move(spec)) {}
  absl::Status DecodeChain(std::vector<std::string>& tokens, DecodeState& state) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && !state.fragment && spec_.prepend_scheme != PrependScheme::kNever;
      tokens[i] = absl::StrReplaceAll(tokens[i], {{spec_.replacement, drop ? "" : " "}});
    }
    return absl::OkStatus();
  }

 private:
  MetaspaceSpec spec_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& spec, const std::string& field) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) return FieldError(field, "must be an object or null");
  const std::string type = TypeName(spec);
  if (type == "Sequence") {
    const json* list = Member(spec, "decoders");
    if (list == nullptr || !list->is_array()) {
      return FieldError(Sub(field, "decoders"), "must be an array");
    }
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> part,
                            ParseDecoder((*list)[i], absl::StrCat(field, ".decoders[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, PatternField(spec, field));
    ABCD_ASSIGN_OR_RETURN(std::string content, StringField(spec, field, "content"));
    const json& pattern = spec["pattern"];
    if (pattern.contains("String")) {
      return std::make_unique<ReplaceDecoder>(nullptr, pattern["String"].get<std::string>(),
                                              std::move(content));
    }
    return std::make_unique<ReplaceDecoder>(std::move(regex), "", std::move(content));
  }
  if (type == "Strip") {
    ABCD_ASSIGN_OR_RETURN(const std::string content, StringField(spec, field, "content"));
    size_t pos = 0;
    const char32_t c = content.empty() ? 0 : NextCodePoint(content, &pos);
    if (content.empty() || pos != content.size()) {
      return FieldError(Sub(field, "content"), "must be one character");
    }
    size_t ends[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const char* key = i == 0 ? "start" : "stop";
      const json* v = Member(spec, key);
      if (v == nullptr || !v->is_number_unsigned()) {
        return FieldError(Sub(field, key), "must be a non-negative integer");
      }
      ends[i] = v->get<size_t>();
    }
    return std::make_unique<StripDecoder>(c, ends[0], ends[1]);
  }
  if (type == "Metaspace") {
    ABCD_ASSIGN_OR_RETURN(MetaspaceSpec m, ParseMetaspace(spec, field));
    return std::make_unique<MetaspaceDecoder>(std::move(m));
  }
  return FieldError(Sub(field, "type"),
                    absl::StrCat("\"", type,
                                 "\" is not supported (supported: Sequence, ByteLevel, "
                                 "ByteFallback, Fuse, Replace, Strip, Metaspace)"));
}

}  // namespace abcd::hf
