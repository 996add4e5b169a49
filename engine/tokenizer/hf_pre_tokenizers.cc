#include "engine/tokenizer/hf_pre_tokenizers.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// A buffer of the call's scratch for as long as this lives.
class ScratchText {
 public:
  explicit ScratchText(PreTokenizeScratch& scratch) : scratch_(scratch), text_(scratch.Take()) {}
  ~ScratchText() { scratch_.Release(); }
  ScratchText(const ScratchText&) = delete;
  ScratchText& operator=(const ScratchText&) = delete;
  std::string& text() { return text_; }

 private:
  PreTokenizeScratch& scratch_;
  std::string& text_;
};

// Hugging Face's NormalizedString::split, streamed: `text` cut at the matches of `regex`, each
// match kept, removed or merged with a neighbour as `behavior` says, every non-empty part handed
// to `sink` as the matches are found (at_start where it begins `text` and `at_start` holds).
// Holds one part at a time, never the list of matches or parts.
absl::Status SplitByPattern(absl::string_view text, bool at_start, const Regex& regex,
                            Behavior behavior, bool invert, PieceSink sink) {
  const auto emit = [&](ByteRange r) {
    if (r.second == r.first) return absl::OkStatus();
    return sink(text.substr(r.first, r.second - r.first), at_start && r.first == 0);
  };
  // The part waiting for what follows it: Contiguous and MergedWithPrevious may extend it;
  // MergedWithNext holds a match there until a non-match joins it.
  ByteRange held{0, 0};
  bool holding = false;
  bool previous_match = false;
  // Each stretch of `text` in order, a match or not (is_match already inverted by `invert`).
  const auto add = [&](ByteRange r, bool is_match) -> absl::Status {
    switch (behavior) {
      case Behavior::kIsolated:
        return emit(r);
      case Behavior::kRemoved:
        return is_match ? absl::OkStatus() : emit(r);
      case Behavior::kContiguous:
      case Behavior::kMergedWithPrevious: {
        const bool joins = behavior == Behavior::kContiguous ? is_match == previous_match
                                                             : is_match && !previous_match;
        previous_match = is_match;
        if (holding && joins) {
          held.second = r.second;
          return absl::OkStatus();
        }
        const ByteRange out = held;
        const bool had = holding;
        held = r;
        holding = true;
        return had ? emit(out) : absl::OkStatus();
      }
      case Behavior::kMergedWithNext:
        if (holding) {
          const ByteRange match = held;
          if (!is_match) {  // the held match joins this stretch
            holding = false;
            return emit({match.first, r.second});
          }
          held = r;  // a match after a match: the first stands alone
          return emit(match);
        }
        if (!is_match) return emit(r);
        held = r;
        holding = true;
        return absl::OkStatus();
    }
    return absl::OkStatus();
  };
  size_t covered = 0;
  const auto on_match = [&](size_t begin, size_t end) -> absl::Status {
    if (covered != begin) {
      if (absl::Status gap = add({covered, begin}, invert); !gap.ok()) return gap;
    }
    covered = end;
    return add({begin, end}, !invert);
  };
  ABCD_RETURN_IF_ERROR(regex.ForEachMatch(text, on_match));
  if (covered != text.size()) ABCD_RETURN_IF_ERROR(add({covered, text.size()}, invert));
  if (holding) return emit(held);
  return absl::OkStatus();
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  absl::Status PreTokenize(absl::string_view text, bool at_start, PreTokenizeScratch& scratch,
                           PieceSink sink) const override {
    return SplitByPattern(text, at_start, *regex_, behavior_, invert_, sink);
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
  absl::Status PreTokenize(absl::string_view text, bool at_start, PreTokenizeScratch& scratch,
                           PieceSink sink) const override {
    ScratchText prefixed(scratch);
    absl::string_view input = text;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
      prefixed.text().assign(1, ' ');
      prefixed.text().append(text.data(), text.size());
      input = prefixed.text();
    }
    ScratchText encoded(scratch);
    const auto encode = [&](absl::string_view piece, bool piece_at_start) {
      ByteLevelEncodeTo(piece, encoded.text());
      return sink(encoded.text(), piece_at_start);
    };
    if (regex_ == nullptr) return encode(input, at_start);
    return SplitByPattern(input, at_start, *regex_, Behavior::kIsolated, false, encode);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: use_regex false
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(MetaspaceSpec spec, std::unique_ptr<Regex> regex)
      : spec_(std::move(spec)), regex_(std::move(regex)) {}
  absl::Status PreTokenize(absl::string_view text, bool at_start, PreTokenizeScratch& scratch,
                           PieceSink sink) const override {
    // Spaces become the replacement, which is put first where the text does not start with it
    // (prepend_scheme "always", or "first" at the start of the input).
    ScratchText replaced(scratch);
    std::string& out = replaced.text();
    out.clear();
    const bool starts = absl::StartsWith(text, " ") || absl::StartsWith(text, spec_.replacement);
    if (!starts && (spec_.prepend_scheme == PrependScheme::kAlways ||
                    (spec_.prepend_scheme == PrependScheme::kFirst && at_start))) {
      out.append(spec_.replacement);
    }
    for (size_t pos = 0; pos < text.size();) {
      const size_t space = std::min(text.find(' ', pos), text.size());
      out.append(text.data() + pos, space - pos);
      if (space < text.size()) out.append(spec_.replacement);
      pos = space + 1;
    }
    if (!spec_.split) return sink(out, at_start);
    return SplitByPattern(out, at_start, *regex_, Behavior::kMergedWithNext, false, sink);
  }

 private:
  MetaspaceSpec spec_;
  std::unique_ptr<Regex> regex_;  // the replacement, literally
};

// Each part's pieces go through the parts after it, one piece at a time.
class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  absl::Status PreTokenize(absl::string_view text, bool at_start, PreTokenizeScratch& scratch,
                           PieceSink sink) const override {
    return From(0, text, at_start, scratch, sink);
  }

 private:
  absl::Status From(size_t first, absl::string_view text, bool at_start,
                    PreTokenizeScratch& scratch, PieceSink sink) const {
    if (first == parts_.size()) return sink(text, at_start);
    const auto next = [&](absl::string_view piece, bool piece_at_start) {
      return From(first + 1, piece, piece_at_start, scratch, sink);
    };
    return parts_[first]->PreTokenize(text, at_start, scratch, next);
  }

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
