// What to send: prompts and output lengths. Prompts come from a file (JSONL with a "prompt" or
// "text" field, or plain text, one per line) in a seeded shuffled order, or are cut from that
// file's text to an exact token count (fixed or uniform in a range; needs the tokenizer).
// Output lengths are fixed or uniform in a range. Request i is a pure function of (seed, i), so
// two runs with the same flags send the same requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "loadtest/lib/driver.h"

namespace abcd::loadtest {

// "N" (fixed) or "MIN:MAX" (uniform, inclusive); 0/0 = unset.
struct LengthRange {
  int min = 0;
  int max = 0;
  bool set() const { return max > 0; }
};
absl::StatusOr<LengthRange> ParseLengthRange(const std::string& flag, const std::string& text);

struct WorkloadOptions {
  std::string prompts_file;
  LengthRange prompt_tokens;  // unset: the file's prompts as they are
  LengthRange output_tokens;  // unset: the file's "output_tokens", else 32
  uint64_t seed = 0;
  RequestSpec base;  // temperature, ignore_eos, model, beam_size, timeout_s for every request
};

class Workload {
 public:
  // `tokenizer` may be null unless prompt_tokens is set; with one, prompt_tokens of file prompts
  // are counted on the client (the server's usage replaces them when it reports one).
  static absl::StatusOr<Workload> Create(const WorkloadOptions& options,
                                         const Tokenizer* tokenizer);

  RequestSpec Make(int64_t index) const;
  size_t prompt_count() const { return prompts_.size(); }

 private:
  struct Prompt {
    std::string text;
    int tokens = 0;
    int output_tokens = 0;  // from the file; 0 = not given
  };

  WorkloadOptions options_;
  std::vector<Prompt> prompts_;
  std::vector<size_t> order_;    // seeded permutation of prompts_
  std::vector<int32_t> corpus_;  // every prompt's tokens, for cut-to-length prompts
  const Tokenizer* tokenizer_ = nullptr;
};

}  // namespace abcd::loadtest
