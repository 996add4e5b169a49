// Golden fixtures written by models/make_fixtures.py: tiny random models of every attention
// type with the PyTorch reference's logits for a prompt and 32 teacher-forced decode steps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/state/state_pool.h"

namespace abcd::testing {

struct Golden {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> source_ids;  // encoder-decoder only
  std::vector<int32_t> decode_ids;
  std::vector<float> prefill_logits;  // [prompt, vocab]
  std::vector<float> decode_logits;   // [decode, vocab]
  std::vector<float> encoder_output;  // GMAT fixtures only: [rows, d]
  // Hugging Face fixtures: the reference's greedy continuation of the prompt (64 ids) and each
  // chosen id's log-probability.
  std::vector<int32_t> greedy_ids;
  std::vector<float> greedy_logprobs;
};

std::vector<std::string> FixtureNames();
std::string FixtureDir(const std::string& name);
Golden LoadGolden(const std::string& name);
float MaxAbsDiff(std::span<const float> a, std::span<const float> b);
// `length` source ids 4 + 7 i mod 90: ordinary tokens in every fixture's vocabulary.
std::vector<int32_t> SourceIds(int64_t length);
// Decodes `tokens` tokens of a fresh sequence from `pool` in one call (expecting finite logits)
// and returns the sequence's state bytes after them; the sequence is released.
int64_t SequenceBytesAfter(const Model& model, StatePool& pool, int64_t tokens);

}  // namespace abcd::testing
