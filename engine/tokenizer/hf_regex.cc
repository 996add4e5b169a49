#include "engine/tokenizer/hf_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd::hf {
namespace {

std::string ErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// The match data of one thread, grown to the largest pattern it has run.
struct MatchData {
  pcre2_match_data* data = nullptr;
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern, bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // (PCRE2_LITERAL allows no PCRE2_UCP: a literal has no classes for it to change.)
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regular expression \"", pattern,
                                                   "\" does not compile (PCRE2, at offset ", offset,
                                                   "): ", ErrorText(error)));
  }
  std::unique_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  regex->pattern_ = std::string(pattern);
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Regex::FindAll(
    absl::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  ABCD_RETURN_IF_ERROR(ForEachMatch(text, [&](size_t begin, size_t end) {
    matches.emplace_back(begin, end);
    return absl::OkStatus();
  }));
  return matches;
}

absl::Status Regex::ForEachMatch(absl::string_view text,
                                 absl::FunctionRef<absl::Status(size_t, size_t)> match) const {
  thread_local MatchData data;
  if (data.data == nullptr) data.data = pcre2_match_data_create(16, nullptr);
  const pcre2_code* code = static_cast<const pcre2_code*>(code_);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (jit_) rc = pcre2_jit_match(code, subject, text.size(), start, 0, data.data, nullptr);
    // The interpreter keeps its backtracking on the heap: long whitespace runs under
    // `\s+(?!\S)` that overflow the JIT's default 32 KiB stack still match there.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("regular expression \"", pattern_, "\": ", ErrorText(rc)));
    }
    // Read before `match` runs: it may match other patterns with this thread's match data.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      start = end;
      ABCD_RETURN_IF_ERROR(match(begin, end));
    } else {
      // An empty match adds nothing: step over one code point.
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return absl::OkStatus();
}

}  // namespace abcd::hf
