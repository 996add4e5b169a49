// A compiled PCRE2 pattern (UTF, Unicode properties: \p{L}, \p{N}, \s as Unicode) for the
// tokenizer.json `Regex` patterns of the Split pre-tokenizer and the Replace normalizer and
// decoder, which Hugging Face's tokenizers runs on Oniguruma; the patterns published
// tokenizers use (GPT-2, Llama 3, Qwen2, ...) mean the same in both. Compiled once (JIT where
// available); FindAll and ForEachMatch are const and thread-safe (each thread has its own match
// data, free again while a callback runs, so a callback may match other patterns).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd::hf {

class Regex {
 public:
  // `pattern` is a regular expression, or with `literal` a string matched as is.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-overlapping, non-empty matches in `text` (valid UTF-8), left to right, as byte
  // [begin, end) ranges. An error only where PCRE2 gives up (its match limits).
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(absl::string_view text) const;
  // The same matches handed to `match(begin, end)` one at a time, left to right, without a list
  // of them; the first error `match` returns ends the walk and is returned.
  absl::Status ForEachMatch(absl::string_view text,
                            absl::FunctionRef<absl::Status(size_t, size_t)> match) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace abcd::hf
