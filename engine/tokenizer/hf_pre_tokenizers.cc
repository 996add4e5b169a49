#include "engine/tokenizer/hf_pre_tokenizers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_regex.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

// GPT-2's pattern, which ByteLevel splits with when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

using ByteRange = std::pair<size_t, size_t>;

// Hugging Face's NormalizedString::split: the text cut at the matches of a pattern, each match
// kept, removed or merged with a neighbour as `behavior` says.
std::vector<ByteRange> SplitRanges(size_t size, const std::vector<ByteRange>& found,
                                   Behavior behavior, bool invert) {
  std::vector<std::pair<ByteRange, bool>> matches;  // covering [0, size), with is_match
  size_t prev = 0;
  for (const ByteRange& m : found) {
    if (prev != m.first) matches.push_back({{prev, m.first}, invert});
    matches.push_back({m, !invert});
    prev = m.second;
  }
  if (prev != size) matches.push_back({{prev, size}, invert});

  std::vector<ByteRange> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& [range, is_match] : matches) out.push_back(range);
      break;
    case Behavior::kRemoved:
      for (const auto& [range, is_match] : matches) {
        if (!is_match) out.push_back(range);
      }
      break;
    case Behavior::kContiguous:
      for (const auto& [range, is_match] : matches) {
        if (is_match == previous_match && !out.empty()) {
          out.back().second = range.second;
        } else {
          out.push_back(range);
        }
        previous_match = is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& [range, is_match] : matches) {
        if (is_match && !previous_match && !out.empty()) {
          out.back().second = range.second;
        } else {
          out.push_back(range);
        }
        previous_match = is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [range, is_match] = *it;
        if (is_match && !previous_match && !out.empty()) {
          out.back().first = range.first;
        } else {
          out.push_back(range);
        }
        previous_match = is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

// Splits every piece by `regex`, keeping the non-empty parts.
absl::Status SplitPieces(std::vector<Piece>& pieces, const Regex& regex, Behavior behavior,
                         bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    ABCD_ASSIGN_OR_RETURN(const std::vector<ByteRange> found, regex.FindAll(piece.text));
    for (const ByteRange& r : SplitRanges(piece.text.size(), found, behavior, invert)) {
      if (r.second == r.first) continue;
      out.push_back(
          {piece.text.substr(r.first, r.second - r.first), piece.at_start && r.first == 0});
    }
  }
  pieces = std::move(out);
  return absl::OkStatus();
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  absl::Status PreTokenize(std::vector<Piece>& pieces) const override {
    return SplitPieces(pieces, *regex_, behavior_, invert_);
  }

 private:
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  absl::Status PreTokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& piece : pieces) {
        // Built anew rather than insert(0, " "): GCC 12 at -O3 reports a false -Wrestrict on
        // the inlined in-place insert.
        if (piece.text.empty() || piece.text[0] != ' ') piece.text = absl::StrCat(" ", piece.text);
      }
    }
    if (regex_ != nullptr) {
      ABCD_RETURN_IF_ERROR(SplitPieces(pieces, *regex_, Behavior::kIsolated, false));
    }
    for (Piece& piece : pieces) piece.text = ByteLevelEncode(piece.text);
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: use_regex false
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(MetaspaceSpec spec, std::unique_ptr<Regex> regex)
      : spec_(std::move(spec)), regex_(std::move(regex)) {}
  absl::Status PreTokenize(std::vector<Piece>& pieces) const override {
    for (Piece& piece : pieces) {
      piece.text = absl::StrReplaceAll(piece.text, {{" ", spec_.replacement}});
      const bool starts = piece.text.compare(0, spec_.replacement.size(), spec_.replacement) == 0;
      if (!starts && (spec_.prepend_scheme == PrependScheme::kAlways ||
                      (spec_.prepend_scheme == PrependScheme::kFirst && piece.at_start))) {
        piece.text.insert(0, spec_.replacement);
      }
    }
    if (!spec_.split) return absl::OkStatus();
    return SplitPieces(pieces, *regex_, Behavior::kMergedWithNext, false);
  }

 private:
  MetaspaceSpec spec_;
  std::unique_ptr<Regex> regex_;  // the replacement, literally
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status PreTokenize(std::vector<Piece>& pieces) const override {
    for (const auto& part : parts_) ABCD_RETURN_IF_ERROR(part->PreTokenize(pieces));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

absl::StatusOr<Behavior> ParseBehavior(const json& spec, const std::string& field) {
  ABCD_ASSIGN_OR_RETURN(const std::string name, StringField(spec, field, "behavior"));
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return FieldError(Sub(field, "behavior"), absl::StrCat("\"", name, "\" is not a behavior"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> RegexSplit(const std::string& pattern,
                                                         Behavior behavior, bool invert) {
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pattern, false));
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

}  // namespace

absl::StatusOr<MetaspaceSpec> ParseMetaspace(const json& spec, const std::string& field) {
  MetaspaceSpec m;
  ABCD_ASSIGN_OR_RETURN(m.replacement, StringField(spec, field, "replacement"));
  size_t pos = 0;
  if (m.replacement.empty() || (NextCodePoint(m.replacement, &pos), pos != m.replacement.size())) {
    return FieldError(Sub(field, "replacement"), "must be one character");
  }
  const json* scheme = Member(spec, "prepend_scheme");
  if (scheme != nullptr) {
    const std::string name = scheme->is_string() ? scheme->get<std::string>() : "";
    if (name == "always") {
      m.prepend_scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      m.prepend_scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      m.prepend_scheme = PrependScheme::kNever;
    } else {
      return FieldError(Sub(field, "prepend_scheme"), "must be \"always\", \"first\" or \"never\"");
    }
  }
  // Older files: add_prefix_space false means "never".
  ABCD_ASSIGN_OR_RETURN(const bool add_prefix_space,
                        BoolField(spec, field, "add_prefix_space", true));
  if (!add_prefix_space) {
    if (m.prepend_scheme != PrependScheme::kNever && scheme != nullptr) {
      return FieldError(Sub(field, "add_prefix_space"), "false contradicts prepend_scheme");
    }
    m.prepend_scheme = PrependScheme::kNever;
  }
  ABCD_ASSIGN_OR_RETURN(m.split, BoolField(spec, field, "split", true));
  return m;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& spec,
                                                                const std::string& field) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) return FieldError(field, "must be an object or null");
  const std::string type = TypeName(spec);
  if (type == "Sequence") {
    const json* list = Member(spec, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return FieldError(Sub(field, "pretokenizers"), "must be an array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      ABCD_ASSIGN_OR_RETURN(
          std::unique_ptr<PreTokenizer> part,
          ParsePreTokenizer((*list)[i], absl::StrCat(field, ".pretokenizers[", i, "]")));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "ByteLevel") {
    ABCD_ASSIGN_OR_RETURN(const bool prefix, BoolField(spec, field, "add_prefix_space", true));
    ABCD_ASSIGN_OR_RETURN(const bool use_regex, BoolField(spec, field, "use_regex", true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      ABCD_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern, false));
    }
    return std::make_unique<ByteLevelPreTokenizer>(prefix, std::move(regex));
  }
  if (type == "Split") {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, PatternField(spec, field));
    ABCD_ASSIGN_OR_RETURN(const Behavior behavior, ParseBehavior(spec, field));
    ABCD_ASSIGN_OR_RETURN(const bool invert, BoolField(spec, field, "invert", false));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
  }
  if (type == "Metaspace") {
    ABCD_ASSIGN_OR_RETURN(MetaspaceSpec m, ParseMetaspace(spec, field));
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(m.replacement, true));
    return std::make_unique<MetaspacePreTokenizer>(std::move(m), std::move(regex));
  }
  if (type == "Digits") {
    ABCD_ASSIGN_OR_RETURN(const bool individual,
                          BoolField(spec, field, "individual_digits", false));
    // Rust's char::is_numeric is \p{N}; a run of them merged is \p{N}+.
    return RegexSplit(individual ? R"(\p{N})" : R"(\p{N}+)", Behavior::kIsolated, false);
  }
  if (type == "Whitespace") return RegexSplit(R"(\w+|[^\w\s]+)", Behavior::kRemoved, true);
  if (type == "WhitespaceSplit") return RegexSplit(R"(\s+)", Behavior::kRemoved, false);
  return FieldError(Sub(field, "type"),
                    absl::StrCat("\"", type,
                                 "\" is not supported (supported: Sequence, ByteLevel, Split, "
                                 "Metaspace, Digits, Whitespace, WhitespaceSplit)"));
}

}  // namespace abcd::hf
