#include "loadtest/lib/workload.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <span>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace abcd::loadtest {
namespace {

std::mt19937_64 RngFor(uint64_t seed, int64_t index, uint64_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                    static_cast<uint32_t>(stream)};
  return std::mt19937_64(seq);
}

int Draw(const LengthRange& range, std::mt19937_64& rng) {
  if (range.min >= range.max) return range.max;
  return std::uniform_int_distribution<int>(range.min, range.max)(rng);
}

}  // namespace

absl::StatusOr<LengthRange> ParseLengthRange(const std::string& flag, const std::string& text) {
  LengthRange range;
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be N or MIN:MAX with 1 <= MIN <= MAX, got \"", text, "\""));
  };
  if (parts.size() == 1) {
    if (!absl::SimpleAtoi(parts[0], &range.min)) return bad();
    range.max = range.min;
  } else if (parts.size() == 2) {
    if (!absl::SimpleAtoi(parts[0], &range.min) || !absl::SimpleAtoi(parts[1], &range.max)) {
      return bad();
    }
  } else {
    return bad();
  }
  if (range.min < 1 || range.max < range.min) return bad();
  return range;
}

absl::StatusOr<Workload> Workload::Create(const WorkloadOptions& options,
                                          const Tokenizer* tokenizer) {
  Workload w;
  w.options_ = options;
  w.tokenizer_ = tokenizer;
  std::ifstream in(options.prompts_file);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompts: cannot open \"", options.prompts_file, "\""));
  }
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    Prompt prompt;
    if (text.front() == '{') {
      const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
      const char* key = j.is_object() && j.contains("prompt") ? "prompt" : "text";
      if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(options.prompts_file, ":", line_number,
                                                       ": expected {\"prompt\": \"...\"}"));
      }
      prompt.text = j[key].get<std::string>();
      if (j.contains("output_tokens") && j["output_tokens"].is_number_integer()) {
        prompt.output_tokens = j["output_tokens"].get<int>();
      }
    } else {
      prompt.text = std::string(text);
    }
    if (prompt.text.empty()) continue;
    if (tokenizer != nullptr) {
      absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(prompt.text);
      if (!ids.ok()) return ids.status();
      prompt.tokens = static_cast<int>(ids->size());
      if (options.prompt_tokens.set()) w.corpus_.insert(w.corpus_.end(), ids->begin(), ids->end());
    }
    w.prompts_.push_back(std::move(prompt));
  }
  if (w.prompts_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompts: \"", options.prompts_file, "\" holds no prompts"));
  }
  if (options.prompt_tokens.set()) {
    if (tokenizer == nullptr) {
      return absl::InvalidArgumentError("--prompt_tokens needs a tokenizer (--tokenizer)");
    }
    if (w.corpus_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_tokens: \"", options.prompts_file, "\" encodes to no tokens"));
    }
  }
  w.order_.resize(w.prompts_.size());
  for (size_t i = 0; i < w.order_.size(); ++i) w.order_[i] = i;
  std::mt19937_64 rng = RngFor(options.seed, -1, 0);
  std::shuffle(w.order_.begin(), w.order_.end(), rng);
  return w;
}

RequestSpec Workload::Make(int64_t index) const {
  RequestSpec spec = options_.base;
  spec.index = index;
  std::mt19937_64 rng = RngFor(options_.seed, index, 1);
  const Prompt& prompt = prompts_[order_[static_cast<size_t>(index) % order_.size()]];
  if (options_.prompt_tokens.set()) {
    const int length = Draw(options_.prompt_tokens, rng);
    absl::StatusOr<std::string> text;
    if (static_cast<size_t>(length) <= corpus_.size()) {
      const size_t last_start = corpus_.size() - static_cast<size_t>(length);
      const size_t start = std::uniform_int_distribution<size_t>(0, last_start)(rng);
      text = tokenizer_->Decode(
          std::span<const int32_t>(corpus_.data() + start, static_cast<size_t>(length)));
    } else {
      // Longer than the whole file (long-context runs): the file's tokens over and over, from a
      // random start, so that no two prompts share a prefix the server could cache.
      const size_t start = std::uniform_int_distribution<size_t>(0, corpus_.size() - 1)(rng);
      std::vector<int32_t> ids(static_cast<size_t>(length));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = corpus_[(start + i) % corpus_.size()];
      text = tokenizer_->Decode(ids);
    }
    spec.prompt = text.ok() ? *text : prompt.text;
    spec.prompt_tokens = length;
  } else {
    spec.prompt = prompt.text;
    spec.prompt_tokens = prompt.tokens;
  }
  if (options_.output_tokens.set()) {
    spec.max_tokens = Draw(options_.output_tokens, rng);
  } else {
    spec.max_tokens = prompt.output_tokens > 0 ? prompt.output_tokens : 32;
  }
  if (spec.temperature > 0) spec.seed = options_.seed * 1000003 + static_cast<uint64_t>(index);
  return spec;
}

}  // namespace abcd::loadtest
