#include "engine/tokenizer/hf_normalizers.h"

#include <utility>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status Normalize(std::string& text) const override {
    for (const auto& part : parts_) ABCD_RETURN_IF_ERROR(part->Normalize(text));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  absl::Status Normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
    return absl::OkStatus();
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  absl::Status Normalize(std::string& text) const override {
    ABCD_ASSIGN_OR_RETURN(text, ReplaceAll(*regex_, text, content_));
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string& text) const override {
    if (right_) text.resize(text.size() - TrailingWhitespace(text));
    if (left_) text.erase(0, LeadingWhitespace(text));
    return absl::OkStatus();
  }

 private:
  bool left_, right_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string& text) const override {
    text = Lowercase(text);
    return absl::OkStatus();
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  absl::Status Normalize(std::string& text) const override {
    ABCD_ASSIGN_OR_RETURN(text, hf::Normalize(text, form_));
    return absl::OkStatus();
  }

 private:
  NormalForm form_;
};

}  // namespace

absl::StatusOr<std::string> ReplaceAll(const Regex& regex, absl::string_view text,
                                       absl::string_view content) {
  ABCD_ASSIGN_OR_RETURN(const auto matches, regex.FindAll(text));
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.data() + last, begin - last);
    out.append(content.data(), content.size());
    last = end;
  }
  out.append(text.data() + last, text.size() - last);
  return out;
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec,
                                                            const std::string& field) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) return FieldError(field, "must be an object or null");
  const std::string type = TypeName(spec);
  if (type == "Sequence") {
    const json* list = Member(spec, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return FieldError(Sub(field, "normalizers"), "must be an array");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      ABCD_ASSIGN_OR_RETURN(
          std::unique_ptr<Normalizer> part,
          ParseNormalizer((*list)[i], absl::StrCat(field, ".normalizers[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") {
    ABCD_ASSIGN_OR_RETURN(std::string prepend, StringField(spec, field, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prepend));
  }
  if (type == "Replace") {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, PatternField(spec, field));
    ABCD_ASSIGN_OR_RETURN(std::string content, StringField(spec, field, "content"));
    return std::make_unique<ReplaceNormalizer>(std::move(regex), std::move(content));
  }
  if (type == "Strip") {
    ABCD_ASSIGN_OR_RETURN(const bool left, BoolField(spec, field, "strip_left", true));
    ABCD_ASSIGN_OR_RETURN(const bool right, BoolField(spec, field, "strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  return FieldError(Sub(field, "type"),
                    absl::StrCat("\"", type,
                                 "\" is not supported (supported: Sequence, Prepend, Replace, "
                                 "Strip, Lowercase, NFC, NFD, NFKC, NFKD)"));
}

}  // namespace abcd::hf
